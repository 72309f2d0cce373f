"""`transformer-serve`'s door: a bad config is one ``error:`` line naming its key and exit
status 2 before any server starts; a good one starts uvicorn on 127.0.0.1 with the app."""

from __future__ import annotations

import sys

import pytest

pytest.importorskip("fastapi")
uvicorn = pytest.importorskip("uvicorn")

from serve_models import models_override  # noqa: E402

from transformer.cli import serve as serve_cli  # noqa: E402


@pytest.fixture
def started(monkeypatch) -> list[dict]:
    """What ``uvicorn.run`` was called with (it is not run, nor is the address tried: port 8000
    may be taken on a test machine; tests/serve/test_serve_start.py tries it)."""
    calls: list[dict] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kwargs: calls.append({"app": app, **kwargs}))
    monkeypatch.setattr(serve_cli, "check_address", lambda host, port: None)
    return calls


def main_status(args: list[str], capsys, monkeypatch) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", ["transformer-serve", "device=cpu", *args])
    capsys.readouterr()
    try:
        serve_cli.main()
        code = 0
    except SystemExit as exc:
        code = 0 if exc.code is None else exc.code
    return code, capsys.readouterr().err


def bad_configs(ck: dict[str, str]) -> dict[str, tuple[list[str], str]]:
    at, nat, pos, sent = ck["translation"], ck["nat"], ck["tagger"], ck["classifier"]
    return {
        "no models": ([], "models: give the models to serve"),
        "an empty list": (["models=[]"], "models=[]"),
        "a missing checkpoint": ([f"models=[{{id:a,ckpt_path:{at}.missing}}]"], "models[0].ckpt_path="),
        "an unknown decode strategy": ([f"models=[{{id:a,ckpt_path:{at},decode:bean}}]"], "models[0].decode=bean"),
        "a duplicate id": ([f"models=[{{id:a,ckpt_path:{at}}},{{id:a,ckpt_path:{pos}}}]"], "models[1].id=a"),
        "an id with a slash": ([f"models=[{{id:'a/b',ckpt_path:{at}}}]"], "models[0].id="),
        "a key the preset lacks": ([f"models=[{{id:a,ckpt_path:{at},decode:beam,beam_sise:4}}]"],
                                   "models[0].beam_sise"),
        "a bad decode value": ([f"models=[{{id:a,ckpt_path:{at},decode:beam,beam_size:0}}]"],
                               "models[0].beam_size=0"),
        "a strategy the checkpoint lacks": ([f"models=[{{id:a,ckpt_path:{nat},decode:beam}}]"],
                                            "models[0].decode=beam"),
        "decode for a tagger": ([f"models=[{{id:a,ckpt_path:{pos},decode:greedy}}]"], "models[0].decode=greedy"),
        "a bad top_k": ([f"models=[{{id:a,ckpt_path:{sent},top_k:0}}]"], "models[0].top_k=0"),
        "a bad port": ([f"models=[{{id:a,ckpt_path:{at}}}]", "port=70000"], "port=70000"),
        "a negative wait": ([f"models=[{{id:a,ckpt_path:{at}}}]", "batch_wait_ms=-1"], "batch_wait_ms=-1"),
        "an unknown server key": ([f"models=[{{id:a,ckpt_path:{at}}}]", "max_qeue=3"], "max_qeue"),
    }


CASES = list(bad_configs({k: "x" for k in ("translation", "nat", "tagger", "classifier")}))


@pytest.mark.parametrize("case", CASES)
def test_a_bad_config_is_one_error_line_and_status_2_before_the_server_starts(case, checkpoints, started, capsys,
                                                                             monkeypatch):
    args, words = bad_configs(checkpoints)[case]
    code, err = main_status(args, capsys, monkeypatch)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], err
    assert started == []


def test_a_good_config_starts_uvicorn_on_loopback_with_the_app(checkpoints, started, capsys, monkeypatch):
    code, err = main_status([models_override(checkpoints), "batching=false"], capsys, monkeypatch)
    assert code == 0, err
    (call,) = started
    assert call["host"] == "127.0.0.1" and call["port"] == 8000
    server = call["app"].state.server
    assert list(server.by_id) == ["at", "beam", "nat", "ctc", "pos", "sent"]
    assert not server.config.batching and server.config.max_queue == 256
