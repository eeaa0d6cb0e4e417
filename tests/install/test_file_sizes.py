"""No product file is over 400 lines: a file that grows past it is split by job, not left to
grow. A session's change put ``reconciling/kubeevents.py`` at 402 lines, and nothing in
``make test`` said so; the stop's own count found it."""

from __future__ import annotations

from pathlib import Path

from tests.support import paths

#: The bound, from issue #38's targets.
MAX_LINES = 400
#: The product and the development stack: what ships, and what ``make test`` runs it on.
ROOTS = ("operator", "devstack")


def lines_of(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_no_product_file_is_over_400_lines() -> None:
    files = [
        f for root in ROOTS for f in (paths.REPOSITORY / root).rglob("*.py") if ".egg" not in str(f)
    ]
    assert len(files) > 300, "the product's files were not found"
    over = {
        str(f.relative_to(paths.REPOSITORY)): n for f in files if (n := lines_of(f)) > MAX_LINES
    }
    assert not over, f"split these by job: {over}"


def test_the_count_is_of_lines_as_wc_counts_them(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("a = 1\n" * (MAX_LINES + 1))
    assert lines_of(sample) == MAX_LINES + 1
