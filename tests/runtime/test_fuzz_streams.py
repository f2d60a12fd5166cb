"""A bounded run of the command-stream fuzzer (benchmarks/fuzz_streams.py): mutated streams of real
compiled models are refused with a coded error or run to a coded result — never an uncoded exception
(a crash would end the test process). Longer campaigns: docs/reliability.md."""

from conftest import load_script


def test_mutated_streams_end_in_coded_errors_or_results(tmp_path, monkeypatch, capsys):
    fuzz = load_script("benchmarks/fuzz_streams.py")
    monkeypatch.chdir(tmp_path)  # a failure would write fuzz_failure.bin here
    assert fuzz.main(["--execs", "1500", "--seed", "7"]) == 0
    out = capsys.readouterr().out
    assert "1500 executions" in out and " ran," in out and "0 uncoded errors" in out
    assert not (tmp_path / "fuzz_failure.bin").exists()
