import json
import subprocess
import sys

from .filler import haystack

QUESTION = "\nWhat did the keeper hide under the blue stone?"


def run(*args, stdin=b""):
    return subprocess.run(
        [sys.executable, "-m", "mixpr", *args], input=stdin, capture_output=True, timeout=60
    )


def test_compresses_a_file_to_stdout_with_stats_on_stderr(tmp_path):
    source = tmp_path / "book.txt"
    source.write_text(haystack(2000, {900: "The keeper hid a brass key under the blue stone."}) + QUESTION)
    done = run("compress", "--budget-tokens", "300", str(source))
    assert done.returncode == 0
    text = done.stdout.decode()
    assert "brass key under the blue stone" in text and text.endswith(QUESTION.strip())
    stats = json.loads(done.stderr)
    assert stats["kept_tokens"] <= 300 < stats["original_tokens"]


def test_reads_stdin_and_accepts_top_k_and_method():
    done = run("compress", "--top-k", "3", "--method", "rag-sparse", "-", stdin=haystack(300, {}).encode())
    assert done.returncode == 0
    assert json.loads(done.stderr)["kept_chunks"] == 4


def one_error_line(done):
    lines = done.stderr.decode().strip().splitlines()
    assert done.returncode != 0 and done.stdout == b""
    assert len(lines) == 1 and lines[0].startswith("mixpr: error: ")
    return lines[0]


def test_missing_file():
    assert "cannot read /no/such/file" in one_error_line(run("compress", "/no/such/file"))


def test_bad_flags():
    assert "--top-k" in one_error_line(run("compress", "--top-k", "zero", "x"))
    assert "invalid choice" in one_error_line(run("compress", "--route", "up", "x"))
    assert "not allowed with" in one_error_line(run("compress", "--top-k", "2", "--budget-tokens", "9"))


def test_unreadable_bytes():
    assert "not UTF-8" in one_error_line(run("compress", "-", stdin=b"\xff\xfe\x00bad"))


def test_query_is_appended_after_a_blank_line_and_is_the_whole_query(tmp_path):
    source = tmp_path / "book.txt"
    fact = "The keeper hid a brass key under the blue stone."
    source.write_text(haystack(2000, {900: fact}))
    question = "Think about the brass key. Where could somebody find it?"
    done = run("compress", "--budget-tokens", "300", "--query", question, str(source))
    assert done.returncode == 0
    text = done.stdout.decode()
    assert fact in text and text.endswith(question)
