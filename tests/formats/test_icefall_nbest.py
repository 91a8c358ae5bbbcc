"""icefall's modified_beam_search N-best: recipes/patches/icefall/ applied with `patch -p1` to icefall's
own beam_search.py and zipformer/decode.py (36e0420c, tests/fixtures/ecosystems/icefall/), the
patched modified_beam_search run on a tiny random transducer (k2's few ragged operations stood in
for), its hypotheses dumped by rescore.formats.icefall.write_nbest as the patched decode.py does, read
and rescored."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from click.testing import CliRunner

from tests.conftest import REPO_ROOT
from tests.formats import ecosystem_writers as ew
from rescore.cli.nbest import main as rescore_nbest
from rescore.formats.icefall import read_icefall, write_nbest

torch = pytest.importorskip("torch")

FIX = REPO_ROOT / "tests" / "fixtures" / "ecosystems" / "icefall"
PATCH = REPO_ROOT / "recipes" / "patches" / "icefall" / "zipformer_modified_beam_search_nbest.patch"
BEAM_SEARCH = "egs/librispeech/ASR/pruned_transducer_stateless2/beam_search.py"
DECODE = "egs/librispeech/ASR/zipformer/decode.py"


@pytest.fixture(scope="module")
def patched(tmp_path_factory):
    """The root of an icefall tree holding the two upstream files, patched as a user patches them."""
    if shutil.which("patch") is None:
        pytest.skip("the 'patch' program is not installed")
    root = tmp_path_factory.mktemp("icefall")
    for name, upstream in ((BEAM_SEARCH, "beam_search.py.upstream"), (DECODE, "zipformer_decode.py.upstream")):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(FIX / upstream, root / name)
    r = subprocess.run(["patch", "-p1", "-i", str(PATCH)], cwd=root, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    return root


def _inputs():
    torch.manual_seed(3)
    return torch.randn(3, 7, 8), torch.tensor([7, 4, 6])  # encoder_out (N, T, C), its lengths


def _decode(module, return_nbest):
    with torch.no_grad():
        return module.modified_beam_search(ew.icefall_tiny_transducer(), *_inputs(), beam=4,
                                           return_nbest=return_nbest)


def test_patched_modified_beam_search_gives_its_hypotheses_best_first(patched, tmp_path):
    upstream = ew.icefall_beam_search_module(FIX / "beam_search.py.upstream")
    module = ew.icefall_beam_search_module(patched / BEAM_SEARCH)
    with torch.no_grad():
        ans = upstream.modified_beam_search(ew.icefall_tiny_transducer(), *_inputs(), beam=4)
    ans2, nbest = _decode(module, return_nbest=True)
    assert ans2 == ans == _decode(module, return_nbest=False)  # the 1-best as before the patch
    assert len(nbest) == 3 and all(len(n) > 1 for n in nbest)
    for best, paths in zip(ans, nbest):
        assert paths[0][0] == best  # rank 1: get_most_probable(length_norm=True)
        assert [p[2] for p in paths] == sorted((p[2] for p in paths), reverse=True)
        assert len({tuple(p[0]) for p in paths}) == len(paths)
    # the dump as the patched decode.py writes it (sp.decode: a function of token ids)
    decode = lambda ids: " ".join(f"w{t}" for t in ids)  # noqa: E731
    dump = tmp_path / "nbest-test-clean.jsonl"
    write_nbest([{"hyps": [p[0] for p in n], "pass1_scores": [p[2] for p in n]} for n in nbest],
                ["c1", "c2", "c3"], decode, dump, refs=["w1 w2", "w3", "w4 w5"])
    table = read_icefall(dump)
    assert table.columns == ("pass1",)
    for u, paths in zip(table.utterances, nbest):
        assert [" ".join(h.words) for h in u.hyps] == [decode(p[0]) for p in paths]
        assert [h.scores[0] for h in u.hyps] == [-p[2] for p in paths]
    r = CliRunner().invoke(rescore_nbest, [str(dump), str(tmp_path / "o"), "--format", "icefall", "--wip", "0.1",
                                           "--write-format", "icefall", "--icefall-suffix", "modified_beam_search"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "o" / "errs-test-clean-modified_beam_search.txt").read_text().startswith("%WER = ")


def test_the_patched_decode_script_has_the_dump(patched):
    text = (patched / DECODE).read_text()
    compile(text, str(patched / DECODE), "exec")
    assert '"--nbest-dump"' in text and "return_nbest=bool(params.nbest_dump)" in text
    assert "from rescore.formats.icefall import write_nbest" in text
