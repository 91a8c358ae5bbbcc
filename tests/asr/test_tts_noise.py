"""Pink noise for rescore-tts-data --snrs (rescore.asr.tts): sox's noise at the asked SNR,
the same on every run, SNRs cycling over documents, and bad values refused before any work."""

from __future__ import annotations

import shutil
import subprocess
import sys
import wave
from pathlib import Path

import numpy as np
import pytest

from rescore.asr.tts import add_noise, parse_snrs, pink_noise
from rescore.errors import OptionError

REPO = Path(__file__).resolve().parents[2]
needs_sox = pytest.mark.skipif(shutil.which("sox") is None, reason="sox missing: apt-get install -y sox")


@needs_sox
def test_pink_noise_is_repeatable_unit_power_and_pink():
    a, b = pink_noise(32000), pink_noise(32000)
    assert a.shape == (32000,) and np.array_equal(a, b)  # sox -R: a fixed seed
    assert abs(np.mean(a ** 2) - 1) < 1e-9
    # Pink: power falls with frequency (about 3 dB an octave), unlike white noise.
    spec = np.abs(np.fft.rfft(a)) ** 2
    f = np.fft.rfftfreq(len(a), 1 / 16000)
    low, high = spec[(f > 100) & (f < 200)].mean(), spec[(f > 3200) & (f < 6400)].mean()
    assert 10 * np.log10(low / high) > 10


@pytest.mark.parametrize("snr", [0.0, 25.0, 35.0])
def test_add_noise_reaches_the_snr_of_the_utterance(snr):
    rng = np.random.default_rng(0)
    speech = (3000 * np.sin(np.arange(16000) / 7) * rng.uniform(0.5, 1, 16000)).astype(np.int16)
    noise = rng.standard_normal(16000)
    noise /= np.sqrt(np.mean(noise ** 2))
    noisy = add_noise(speech, noise, snr).astype(np.float64)
    added = noisy - speech
    measured = 10 * np.log10(np.mean(speech.astype(np.float64) ** 2) / np.mean(added ** 2))
    assert abs(measured - snr) < 0.05


def test_bad_snrs_are_refused_naming_the_option():
    assert parse_snrs(["clean", "30", "-5"]) == [None, 30.0, -5.0]
    for bad in ("loud", "nan", "inf", "1e9"):
        with pytest.raises(OptionError, match="--snrs"):
            parse_snrs([bad])


def test_cli_refuses_a_bad_snr_before_any_work(tmp_path):
    (tmp_path / "t.txt").write_text("one two three\n")
    r = subprocess.run([sys.executable, "-m", "rescore.cli.tts_data", str(tmp_path / "t.txt"), str(tmp_path / "out"),
                        "--snrs", "clean,loud"], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 2 and "--snrs" in r.stderr and "loud" in r.stderr
    assert not (tmp_path / "out").exists()


@needs_sox
@pytest.mark.skipif(shutil.which("flite") is None, reason="flite missing: apt-get install -y flite")
def test_snrs_cycle_over_documents_and_only_noisy_ones_change(tmp_path):
    from rescore.asr.tts import make_tts_data_dir

    (tmp_path / "t.txt").write_text("the cat sat down\n\nthe dog ran off\n\nthe bird flew up\n")
    make_tts_data_dir(tmp_path / "t.txt", tmp_path / "clean", voices=["kal16"], gap=0, nj=1)
    make_tts_data_dir(tmp_path / "t.txt", tmp_path / "noisy", voices=["kal16"], gap=0, nj=1, snrs=["clean", "20"])
    cond = dict(ln.split(" ", 1) for ln in (tmp_path / "noisy" / "utt2cond").read_text().splitlines())
    assert sorted(cond.values()) == ["voice=flite-kal16 snr=20", "voice=flite-kal16 snr=clean",
                                     "voice=flite-kal16 snr=clean"]

    def samples(d, reco):
        with wave.open(str(tmp_path / d / "wav" / f"{reco}.wav")) as w:
            return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float64)

    for reco, snr in (("0000", None), ("0001", 20.0), ("0002", None)):
        clean, noisy = samples("clean", reco), samples("noisy", reco)
        if snr is None:
            assert np.array_equal(clean, noisy)
        else:
            measured = 10 * np.log10(np.mean(clean ** 2) / np.mean((noisy - clean) ** 2))
            assert abs(measured - snr) < 0.1
    assert (tmp_path / "clean" / "segments").read_text() == (tmp_path / "noisy" / "segments").read_text()
