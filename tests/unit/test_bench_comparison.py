"""The frame of benchmarks/' comparison scripts (nexus_lab.bench.comparison): a recorded section replaces only
the section under its own heading, or is appended once."""

from __future__ import annotations

from pathlib import Path

from nexus_lab.bench.comparison import record_section, scratch

RESULTS = "# Benchmark results\n\n## First\n\nold first\n\n## Second\n\nsecond stays\n"


def test_a_recorded_section_replaces_its_own_heading_only(tmp_path: Path) -> None:
    """Recording `## First` again rewrites that section and leaves `## Second` as it was."""
    results = tmp_path / "RESULTS.md"
    results.write_text(RESULTS)
    record_section(results, ["## First", "", "new first"])
    assert results.read_text() == RESULTS.replace("old first", "new first")


def test_a_new_section_is_appended_once(tmp_path: Path) -> None:
    """A heading not yet in the file is appended at the end; recording it twice leaves one copy."""
    results = tmp_path / "RESULTS.md"
    results.write_text(RESULTS)
    for _ in range(2):
        record_section(results, ["## Third", "", "third"])
    assert results.read_text() == RESULTS + "\n## Third\n\nthird\n"


def test_the_scratch_directory_is_removed_afterwards() -> None:
    """The scratch directory exists inside the block and is gone, with its files, after it."""
    with scratch("nexus-test-") as directory:
        (directory / "file").write_text("x")
        assert directory.is_dir()
    assert not directory.exists()
