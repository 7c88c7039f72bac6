"""scripts/check_outputs.py: the build's executed chapters against their committed outputs."""

from __future__ import annotations

import nbformat
import pytest
from scripts_loader import load_script

check = load_script("check_outputs")


def stream(text, name="stdout"):
    return nbformat.v4.new_output("stream", name=name, text=text)


CHECKED = "# checked\n"  # a source starting so is tagged nbval-check-output


def notebook(*cells):
    nb = nbformat.v4.new_notebook()
    for source, outputs in cells:
        cell = nbformat.v4.new_code_cell(source.removeprefix(CHECKED))
        if source.startswith(CHECKED):
            cell.metadata["tags"] = ["nbval-check-output"]
        cell.outputs = outputs
        nb.cells.append(cell)
    nb.cells.insert(0, nbformat.v4.new_markdown_cell("# a chapter"))
    return nb


def test_comparable_merges_streams_and_ignores_what_nbval_ignores():
    result = nbformat.v4.new_output("execute_result", data={"text/plain": "3", "image/png": "AAAA"}, execution_count=7)
    a = check.comparable([stream("a\n"), stream("b\n"), stream("warn\n", "stderr"), result])
    result_b = nbformat.v4.new_output("execute_result", data={"text/plain": "3", "image/png": "BBBB"}, execution_count=9)
    b = check.comparable([stream("a\nb\n"), stream("warn\n", "stderr"), result_b])
    assert a == b == {"stdout": ["a\nb\n"], "stderr": ["warn\n"], "text/plain": ["3"]}


def test_differences_report_checked_cells_only():
    committed = notebook((CHECKED + "print(x)", [stream("loss 0.066\n")]), ("print(y)", [stream("1.5\n")]))
    same = notebook((CHECKED + "print(x)", [stream("loss 0.066\n")]), ("print(y)", [stream("1.7\n")]))
    moved = notebook((CHECKED + "print(x)", [stream("loss 0.067\n")]), ("print(y)", [stream("1.5\n")]))
    assert check.differences(committed, same, "ch") == []
    [report] = check.differences(committed, moved, "ch")
    assert "cell 1" in report and "-loss 0.066" in report and "+loss 0.067" in report


def test_reads_the_build_cache_and_fails_on_a_moved_number(tmp_path, monkeypatch, capsys):
    from jupyter_cache import get_cache

    committed = notebook((CHECKED + "print('loss', 0.066)", [stream("loss 0.066\n")]))
    chapter = tmp_path / "ch99_test.ipynb"
    nbformat.write(committed, chapter)
    executed = notebook((CHECKED + "print('loss', 0.066)", [stream("loss 0.067\n")]))
    executed_path = tmp_path / "executed.ipynb"
    nbformat.write(executed, executed_path)
    cache_dir = tmp_path / "cache"
    get_cache(str(cache_dir)).cache_notebook_file(str(executed_path), check_validity=False)
    monkeypatch.setattr(check, "CACHE", cache_dir)

    assert check.main([str(chapter)]) == 1
    out = capsys.readouterr().out
    assert "1 of 1 checked cells differ" in out and "+loss 0.067" in out

    nbformat.write(notebook((CHECKED + "print('loss', 0.066)", [stream("loss 0.066\n")])), executed_path)
    get_cache(str(cache_dir)).cache_notebook_file(str(executed_path), check_validity=False, overwrite=True)
    assert check.main([str(chapter)]) == 0


def test_a_chapter_missing_from_the_cache_is_an_error_not_a_pass(tmp_path, monkeypatch):
    from jupyter_cache import get_cache

    other = tmp_path / "other.ipynb"   # the cache holds another notebook only
    nbformat.write(notebook(("print(2)", [stream("2\n")])), other)
    get_cache(str(tmp_path / "cache")).cache_notebook_file(str(other), check_validity=False)
    monkeypatch.setattr(check, "CACHE", tmp_path / "cache")
    chapter = tmp_path / "ch99_test.ipynb"
    nbformat.write(notebook((CHECKED + "print(1)", [stream("1\n")])), chapter)
    with pytest.raises(SystemExit, match="no executed copy"):
        check.main([str(chapter)])
