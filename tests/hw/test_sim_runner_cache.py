"""``sim.runner``'s build cache records the sources the process loaded, not the files as
they are when a build ends (an edit during a run must not be recorded as built)."""

from __future__ import annotations

from sim import runner


def test_fingerprint_is_of_the_loaded_sources(monkeypatch, tmp_path):
    (tmp_path / "hw").mkdir()
    source = tmp_path / "hw" / "block.py"
    source.write_text("WIDTH = 8\n")
    monkeypatch.setattr(runner, "SOURCE_DIRS", (tmp_path / "hw",))
    monkeypatch.setattr(runner, "REPO_ROOT", tmp_path)
    monkeypatch.setattr(runner, "_LOADED", None)
    loaded = runner.loaded_fingerprint()
    assert loaded == runner.source_fingerprint()
    source.write_text("WIDTH = 16\n")              # edited while the process runs
    assert runner.source_fingerprint() != loaded    # the files on disk changed ...
    assert runner.loaded_fingerprint() == loaded    # ... what this process built from did not
    monkeypatch.setattr(runner, "_LOADED", None)    # a new process sees the edit
    assert runner.loaded_fingerprint() == runner.source_fingerprint() != loaded
