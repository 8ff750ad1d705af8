"""A bench run of one section replaces that section of BENCHMARKS.md and keeps the others."""

from lab.bench_rebalance import splice


def test_splice_replaces_its_own_section_and_appends_a_new_one():
    text = "# Benchmarks\n\n## Old section without markers\n1\n"
    once = splice(text, "rebalance", "## Rebalance\nfirst\n")
    assert once.startswith(text.rstrip("\n")) and "first" in once
    twice = splice(once + "\n## After\n2\n", "rebalance", "## Rebalance\nsecond\n")
    assert "first" not in twice and "second" in twice
    assert "## Old section without markers" in twice and "## After\n2" in twice
    assert twice.count("<!-- bench:rebalance -->") == 1
