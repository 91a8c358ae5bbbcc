"""Every command's job is checked when built: a bad value, or an output that is one of the job's
inputs, is an OptionError naming the option before any work, and the inputs stay as they were.
The jobs' modules import no torch (the commands' --help and option checks stay instant)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rescore.asr.pocketsphinx_nbest import DecoderSettings
from rescore.errors import OptionError
from rescore.jobs.import_lm import ImportKaldiLmJob, ImportLmJob
from rescore.jobs.lattice import ApplyJob, CoverJob, LatticeTuneJob
from rescore.jobs.make_nbest import MakeNbestJob
from rescore.jobs.ppl import CacheTuneJob, PplJob
from rescore.jobs.train_lm import TrainLmJob
from rescore.jobs.tts_data import TtsDataJob
from rescore.train.options import TrainOptions


@pytest.fixture
def files(tmp_path):
    """Two input files (their bytes are checked unchanged) and the dir they are in."""
    (tmp_path / "a.txt").write_text("the cat sat\n")
    (tmp_path / "b.txt").write_text("a dog ran\n")
    return tmp_path, str(tmp_path / "a.txt"), str(tmp_path / "b.txt")


def _model_pt(d):
    """A model file named as the output the import writes (OUT_DIR/model.pt)."""
    (d / "model.pt").write_bytes(b"weights")
    return str(d / "model.pt")


CASES = {
    "ppl-report-is-the-text": (lambda d, a, b: PplJob(a, b, report=b), "--report"),
    "ppl-plot-is-the-checkpoint": (lambda d, a, b: PplJob(a, b, plot=a), "--plot"),
    "cache-tune-report-is-the-text": (lambda d, a, b: CacheTuneJob(a, b, (100,), (0.3,), (0.1,), report=b),
                                      "--report"),
    "cache-tune-no-windows": (lambda d, a, b: CacheTuneJob(a, b, (), (0.3,), (0.1,)), "--cache-windows"),
    "cover-scale": (lambda d, a, b: CoverJob(a, str(d / "out"), 0.0), "--acoustic-scale"),
    "cover-output-is-the-lattices": (lambda d, a, b: CoverJob(a, a, 0.1), "NBEST_OUT"),
    "apply-weight": (lambda d, a, b: ApplyJob(a, str(d), str(d / "out"), 0.1, 1.5), "--weight"),
    "apply-output-is-the-lattices": (lambda d, a, b: ApplyJob(a, str(d), a, 0.1, 0.5), "LATS_OUT"),
    "lattice-tune-report-is-an-input": (lambda d, a, b: LatticeTuneJob(str(d), str(d), a, {0.5: str(d)}, (10.0,),
                                                                       (0.0,), report=a), "--report"),
    "import-dtype": (lambda d, a, b: ImportLmJob(a, str(d / "out"), dtype="int8"), "--dtype"),
    "import-kaldi-model-type": (lambda d, a, b: ImportKaldiLmJob(a, b, str(d / "out"), "RNN", 8, 8, 1),
                                "--model-type"),
    "import-kaldi-output-is-an-input": (lambda d, a, b: ImportKaldiLmJob(_model_pt(d), b, str(d), "LSTM", 8, 8, 1),
                                        "OUT_DIR"),
    "make-nbest-wip": (lambda d, a, b: MakeNbestJob(str(d), str(d / "out"), DecoderSettings(wip=2.0)), "--wip"),
    "make-nbest-nj": (lambda d, a, b: MakeNbestJob(str(d), str(d / "out"), nj=0), "--nj"),
    "tts-no-voices": (lambda d, a, b: TtsDataJob(a, str(d / "out"), voices=()), "--voices"),
    "tts-snrs": (lambda d, a, b: TtsDataJob(a, str(d / "out"), snrs=("loud",)), "--snrs"),
    "train-classes": (lambda d, a, b: TrainLmJob(TrainOptions(a, b, d / "out"), {"classes": "many"}), "--classes"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_bad_job_is_refused_when_built(files, name):
    d, a, b = files
    build, option = CASES[name]
    with pytest.raises(OptionError) as e:
        build(d, a, b)
    assert e.value.option == option
    assert (d / "a.txt").read_text() == "the cat sat\n" and (d / "b.txt").read_text() == "a dog ran\n"
    assert not (d / "model.pt").exists() or (d / "model.pt").read_bytes() == b"weights"
    assert not (d / "out").exists()


def test_the_job_modules_import_no_torch():
    mods = ["wer", "ppl", "lattice", "train_lm", "import_lm", "make_nbest", "tts_data", "tune", "refine"]
    code = ("import sys\n" + "".join(f"import rescore.jobs.{m}\n" for m in mods)
            + "assert 'torch' not in sys.modules, 'torch imported'")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
