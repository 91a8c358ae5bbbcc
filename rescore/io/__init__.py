"""Readers and writers for the file formats rescore speaks (Kaldi tables, symbol tables, data dirs)."""

from rescore.io.kaldi import (
    DataDir,
    Table,
    atomic_output,
    invert_symbol_table,
    read_data_dir,
    read_nn_costs,
    read_symbol_table,
    read_table,
    read_text_table,
    write_nn_costs,
    write_table,
)

__all__ = [
    "DataDir",
    "Table",
    "atomic_output",
    "invert_symbol_table",
    "read_data_dir",
    "read_nn_costs",
    "read_symbol_table",
    "read_table",
    "read_text_table",
    "write_nn_costs",
    "write_table",
]
