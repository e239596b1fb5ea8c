"""Several models behind one ramjet (issue 28).

Three ramjet-sim engines: engine 0 serves `alpha` (and the LoRA adapter `alpha-sql` on it),
engine 1 serves `beta`, engine 2 serves both names (vLLM's --served-model-name a b). ramjet reads
each engine's GET /v1/models (or RJ_UPSTREAM_MODELS) and routes a request only among the engines
serving its `model`: retries and fail-open stay in that pool; a model no engine serves is
answered 404 by ramjet with no engine dialed; GET /v1/models is the engines' cards merged.
"""

from __future__ import annotations

import json
import signal
import uuid
from collections import Counter

import pytest

from support.e2e import CHAT
from support.ramjet_proc import http_request, poll
from support.sim_proc import SimProc

SIM = ("--preset", "tiny", "--speed", "20")
MESSAGES = "/v1/messages"


@pytest.fixture
def sims():
    made = [SimProc(*SIM, "--served-model-name", "alpha", "--lora-modules", "alpha-sql=/adapters/sql"),
            SimProc(*SIM, "--served-model-name", "beta"),
            SimProc(*SIM, "--served-model-name", "alpha", "beta")]
    yield made
    for s in made:
        s.stop()


def body(model, tag=None, **kw) -> dict:
    tag = tag or uuid.uuid4().hex  # a prompt no engine has seen: no cache pulls it anywhere
    b = {"max_tokens": 2, "messages": [{"role": "user", "content": f"{tag} " * 16}], **kw}
    if model is not None:
        b["model"] = model
    return b


def post(rj, b, path=CHAT):
    data = b if isinstance(b, bytes) else json.dumps(b).encode()
    return http_request(rj.api_port, "POST", path, data, {"Content-Type": "application/json"}, timeout=30)


def prompt_tokens(sims) -> list:
    return [s.admin("/sim/stats", {})["prompt_tokens"] for s in sims]


def models_known(rj, ids):
    """Waits until ramjet answers GET /v1/models itself with exactly these ids."""
    def merged():
        r = rj.request("GET", "/v1/models")
        if r.status != 200 or r.header("X-Ramjet-Upstream") is not None:
            return None
        got = [c["id"] for c in r.json()["data"]]
        return r if sorted(got) == sorted(ids) else None
    return poll(merged, timeout=10, what=f"ramjet's /v1/models lists {ids}")


def test_each_model_goes_only_to_its_engines_and_the_list_is_merged(sims, ramjet_factory):
    rj = ramjet_factory([s.url for s in sims])
    r = models_known(rj, ["alpha", "alpha-sql", "beta"])
    cards = {c["id"]: c for c in r.json()["data"]}
    assert cards["alpha-sql"]["parent"] == "alpha"
    assert all(c["object"] == "model" for c in cards.values())
    served = {m: Counter() for m in ("alpha", "beta", "alpha-sql")}
    for i in range(12):
        for model in served:
            r = post(rj, body(model))
            assert r.status == 200, (model, r)
            assert r.json()["model"] in ("alpha", "beta", "alpha-sql")
            served[model][r.header("X-Ramjet-Upstream")] += 1
    assert set(served["alpha"]) == {"0", "2"}, served   # both of alpha's engines, never beta's
    assert set(served["beta"]) == {"1", "2"}, served
    assert set(served["alpha-sql"]) == {"0"}, served    # the adapter only where it is loaded
    m = rj.metrics()
    assert m.val("ramjet_model_requests_total", model="alpha") == 24  # alpha and its adapter
    assert m.val("ramjet_model_requests_total", model="beta") == 12
    assert m.val("ramjet_model_engines", model="alpha", state="listed") == 2
    assert m.val("ramjet_model_engines", model="beta", state="healthy") == 2


def test_an_unknown_or_bad_model_is_answered_by_ramjet_and_no_engine_is_dialed(sims, ramjet_factory):
    rj = ramjet_factory([s.url for s in sims])
    models_known(rj, ["alpha", "alpha-sql", "beta"])
    before = prompt_tokens(sims)
    r = post(rj, body("gamma"))
    assert r.status == 404, r
    assert r.json() == {"error": {"message": "The model `gamma` does not exist.", "type": "NotFoundError",
                                  "param": "model", "code": 404}}
    assert r.header("X-Ramjet-Upstream") is None
    # Anthropic's own shape on /v1/messages.
    r = post(rj, body("gamma"), MESSAGES)
    assert r.status == 404 and r.json() == {"type": "error", "error": {
        "type": "not_found_error", "message": "The model `gamma` does not exist."}}, r
    for bad in (5, "", "x" * 1025, None, ["alpha"]):
        b = body(None)
        b["model"] = bad
        r = post(rj, b)
        assert r.status == 400, (bad, r)
        assert "model" in r.json()["error"]["message"]
    # No model named while two base models are served: which one is the client's to say.
    r = post(rj, body(None))
    assert r.status == 400 and "several models" in r.json()["error"]["message"], r
    assert prompt_tokens(sims) == before, "no refused request reached an engine"
    m = rj.metrics()
    assert m.val("ramjet_request_rejections_total", reason="unknown_model") == 2
    assert m.val("ramjet_request_rejections_total", reason="bad_model") == 5
    assert m.val("ramjet_request_rejections_total", reason="model_required") == 1
    # The client's model name is echoed to it alone: never in the log or the metrics.
    metrics_text = http_request(rj.metrics_port, "GET", "/metrics").body.decode()
    assert "gamma" not in rj.output() and "gamma" not in metrics_text


def test_a_failing_engine_moves_its_requests_within_the_models_pool(sims, ramjet_factory):
    rj = ramjet_factory([s.url for s in sims])
    models_known(rj, ["alpha", "alpha-sql", "beta"])
    sims[2].admin("/sim/fault", {"error_rate": 1.0, "error_status": 503})
    for i in range(8):
        r = post(rj, body("beta"))
        # beta's other engine (1) answers; alpha's engine 0 is never tried for beta.
        assert r.status == 200 and r.header("X-Ramjet-Upstream") == "1", r
    sims[1].stop()
    r = post(rj, body("beta"))
    assert r.status in (502, 503), r   # both of beta's engines down: never alpha's engine
    assert prompt_tokens(sims[:1])[0] == 0, "alpha's engine got beta's request"


def test_declared_models_decide_and_a_reload_changes_them(sims, ramjet_factory, tmp_path):
    # Engine 2 serves both names but is declared for beta only: alpha stays on engine 0.
    conf = tmp_path / "ramjet.conf"
    urls = ",".join(s.url for s in sims)
    conf.write_text(f"RJ_UPSTREAM={urls}\nRJ_UPSTREAM_MODELS=alpha,beta,beta\n")
    rj = ramjet_factory(env={"RJ_CONFIG_FILE": str(conf)})
    models_known(rj, ["alpha", "alpha-sql", "beta"])
    ups = {post(rj, body("alpha")).header("X-Ramjet-Upstream") for _ in range(8)}
    assert ups == {"0"}, ups
    # A reload declares engine 2 for alpha as well.
    conf.write_text(f"RJ_UPSTREAM={urls}\nRJ_UPSTREAM_MODELS=alpha,beta,alpha|beta\n")
    rj.proc.send_signal(signal.SIGHUP)
    poll(lambda: rj.metrics().get("ramjet_config_reloads_total", outcome="applied") == 1, what="the reload")
    poll(lambda: "2" in {post(rj, body("alpha")).header("X-Ramjet-Upstream") for _ in range(8)},
         what="engine 2 serving alpha after the reload")
