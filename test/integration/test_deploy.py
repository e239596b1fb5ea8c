"""Static validation of deploy/: the container image recipe, the Compose files, the Kubernetes
manifests and the Grafana dashboard. No container engine and no cluster: real validators only.

- Compose: Debian's docker-compose (1.29) `config -q` on each file, then the two-speed topology
  read back from `docker-compose config` (every per-engine list of ramjet's matches the engines'
  own flags).
- Kubernetes: kustomize rendering (`kubectl kustomize` when kubectl is installed; otherwise the
  small renderer below, which handles exactly the kustomize features deploy/ uses and is checked
  against kubectl wherever both exist), then every object of the base files, the rendered base
  and the rendered overlay against the Kubernetes and prometheus-operator JSON schemas
  (test/deploy/validate_k8s.mjs: kubernetes-models, pinned in test/deploy/package-lock.json),
  unknown fields included; then the wiring (probes, selectors, DNS names, ports, config file).
- Every RJ_* name used in deploy/ (and in README's deployment sections) is documented in
  docs/configuration.md; every metric the dashboard queries is in docs/metrics.md.
- The Dockerfile: the build stage installs scripts/setup's build packages; the runtime stage's
  packages cover the shared libraries of the built binaries (when a build exists).

Needs no ramjet binary except for the last check (skipped without one). The tools come from
scripts/setup: docker-compose, python3-yaml, node + `npm ci` in test/deploy.
"""

import copy
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
COMPOSE_DIR = DEPLOY / "compose"
K8S = DEPLOY / "kubernetes"
COMPOSE_FILES = ["compose.yaml", "compose.sim.yaml"]
KUSTOMIZATIONS = ["base", "overlays/example"]

# vLLM's KVEventsConfig keys (specs/vllm-contracts.md §2.1).
KV_EVENTS_KEYS = {"enable_kv_cache_events", "publisher", "endpoint", "replay_endpoint", "buffer_steps", "hwm",
                  "max_queue_size", "topic"}

RJ_NAME = re.compile(r"\bRJ_[A-Z0-9_]+\b")


def need_tool(name):
    path = shutil.which(name)
    if not path:
        pytest.fail(f"{name} not found: run scripts/setup (as root)", pytrace=False)
    return path


def documented_rj_names():
    text = (ROOT / "docs/configuration.md").read_text()
    names = set(re.findall(r"^\| `(RJ_[A-Z0-9_]+)` \|", text, re.M))
    assert len(names) > 50, "docs/configuration.md: the options table was not found"
    return names


def documented_metrics():
    """{family: type} from docs/metrics.md's tables."""
    text = (ROOT / "docs/metrics.md").read_text()
    fams = dict(re.findall(r"^\| `(ramjet_[a-z0-9_]+)` \| (counter|gauge|histogram) \|", text, re.M))
    assert len(fams) > 50, "docs/metrics.md: the family tables were not found"
    return fams


def env_file(text):
    """RJ_NAME=value lines (blank lines and # comments skipped) -> dict."""
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, value = line.partition("=")
        assert sep, f"not NAME=value: {line!r}"
        out[name.strip()] = value.strip()
    return out


def items(value):
    return [v.strip() for v in value.split(",") if v.strip()]


def flag_values(args, flag):
    """Values of --flag=V / --flag V in an argument list."""
    out = []
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            out.append(args[i + 1])
        elif a.startswith(flag + "="):
            out.append(a[len(flag) + 1:])
    return out


def check_kv_events_config(args, where):
    """The engine's --kv-events-config: vLLM's keys only, ZMQ, PUB + replay bound on all
    addresses. Returns (live port, replay port, topic)."""
    cfgs = flag_values(args, "--kv-events-config")
    assert len(cfgs) == 1, f"{where}: one --kv-events-config expected, got {cfgs}"
    cfg = json.loads(cfgs[0])
    assert set(cfg) <= KV_EVENTS_KEYS, f"{where}: keys vLLM does not know: {set(cfg) - KV_EVENTS_KEYS}"
    assert cfg.get("enable_kv_cache_events") is True, where
    assert cfg.get("publisher") == "zmq", f"{where}: publisher must be zmq (older vLLM defaults to null)"
    live = re.fullmatch(r"tcp://\*:(\d+)", cfg.get("endpoint", ""))
    replay = re.fullmatch(r"tcp://\*:(\d+)", cfg.get("replay_endpoint", ""))
    assert live and replay, f"{where}: endpoint/replay_endpoint must bind tcp://*:PORT (vLLM binds only with *)"
    return int(live.group(1)), int(replay.group(1)), cfg.get("topic", "")


def is_mtp_engine(args):
    """vLLM: --speculative-config with an MTP method; ramjet-sim: an -mtp preset or draft tokens."""
    for spec in flag_values(args, "--speculative-config"):
        if "mtp" in json.loads(spec).get("method", ""):
            return True
    if any("-mtp" in p for p in flag_values(args, "--preset")):
        return not any(t == "0" for t in flag_values(args, "--speculative-tokens"))
    return any(t != "0" for t in flag_values(args, "--speculative-tokens"))


# ----------------------------------------------------------------------------------- Compose

def compose(file, *args):
    exe = need_tool("docker-compose")
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPOSE_")}
    return subprocess.run([exe, "-f", file, *args], cwd=COMPOSE_DIR, env=env, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("name", COMPOSE_FILES)
def test_compose_file_is_valid(name):
    r = compose(name, "config", "-q")
    assert r.returncode == 0, f"docker-compose -f {name} config -q:\n{r.stderr}"


@pytest.mark.parametrize("name", COMPOSE_FILES)
def test_compose_two_speed_topology(name):
    r = compose(name, "config")
    assert r.returncode == 0, r.stderr
    services = yaml.safe_load(r.stdout)["services"]
    env = services["ramjet"]["environment"]
    for k in env:
        assert RJ_NAME.fullmatch(k) or not k.startswith("RJ"), k
    upstreams = items(env["RJ_UPSTREAM"])
    profiles = items(env["RJ_UPSTREAM_PROFILES"])
    live = items(env["RJ_KV_EVENT_LIVE_ENDPOINTS"])
    replay = items(env["RJ_KV_EVENT_REPLAY_ENDPOINTS"])
    assert len(upstreams) == 2 and sorted(profiles) == ["mtp", "standard"], (upstreams, profiles)
    assert len(live) == len(upstreams) == len(replay), "one KV endpoint per upstream, in RJ_UPSTREAM order"
    assert env["RJ_EXACT_ROUTE_MODE"] == "on"
    published = {str(p["target"]) for p in services["ramjet"]["ports"]}
    assert {"8000", "9090"} <= published, "ramjet publishes the API (8000) and metrics (9090) ports"

    for url, profile, live_ep, replay_ep in zip(upstreams, profiles, live, replay):
        m = re.fullmatch(r"http://([a-z0-9-]+):(\d+)", url)
        assert m, url
        host, port = m.group(1), m.group(2)
        assert host in services, f"RJ_UPSTREAM names {host}, which is not a service"
        engine = services[host]
        args = engine["command"]
        assert flag_values(args, "--port") == [port], f"{host} must listen on {port}"
        live_port, replay_port, topic = check_kv_events_config(args, f"{name}:{host}")
        assert live_ep == f"tcp://{host}:{live_port}", f"live endpoint of {host}: {live_ep}"
        assert replay_ep == f"tcp://{host}:{replay_port}", f"replay endpoint of {host}: {replay_ep}"
        assert env.get("RJ_KV_EVENT_TOPIC", "") == topic, "RJ_KV_EVENT_TOPIC must be the engines' topic"
        assert "--no-enable-prefix-caching" not in args, host
        assert is_mtp_engine(args) == (profile == "mtp"), f"{host} is declared {profile}"
        if engine["image"].startswith("vllm/"):
            tag = engine["image"].partition(":")[2]
            assert re.fullmatch(r"v\d+\.\d+\.\d+", tag), f"{host}: pin vLLM to a release tag, not {tag!r}"
            assert "--enable-prefix-caching" in args, host
            devices = engine["deploy"]["resources"]["reservations"]["devices"]
            assert any(d.get("driver") == "nvidia" and "gpu" in d.get("capabilities", []) for d in devices), host
        else:
            assert engine.get("entrypoint") == ["/usr/local/bin/ramjet-sim"], host
            assert "deploy" not in engine, f"{host}: a simulated engine needs no GPU"


# -------------------------------------------------------------------------------- Kubernetes

CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition", "PersistentVolume",
                  "StorageClass", "PriorityClass"}


def strategic_merge(base, patch):
    """Strategic merge as kustomize applies it to the fields deploy/ patches: maps merge, lists
    of named maps (containers, env, ports, volumes, ...) merge by name, other lists replace."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for k, v in patch.items():
            assert not str(k).startswith("$"), f"strategic-merge directive {k} is not supported here"
            out[k] = strategic_merge(base[k], v) if k in base else copy.deepcopy(v)
        return out
    if (isinstance(base, list) and isinstance(patch, list) and patch
            and all(isinstance(x, dict) and "name" in x for x in base + patch)):
        out = [copy.deepcopy(x) for x in base]
        for p in patch:
            idx = next((i for i, x in enumerate(out) if x["name"] == p["name"]), None)
            if idx is None:
                out.append(copy.deepcopy(p))
            else:
                out[idx] = strategic_merge(out[idx], p)
        return out
    return copy.deepcopy(patch)


def pod_specs(obj):
    spec = obj.get("spec", {})
    if "template" in spec:
        yield spec["template"]["spec"]


def render_kustomization(path):
    """The kustomize features deploy/ uses: resources (files and kustomization folders),
    namespace, images (newName/newTag) and patches by path (strategic merge, matched by kind and
    name). Anything else fails, so a new feature cannot pass unrendered."""
    k = yaml.safe_load((path / "kustomization.yaml").read_text())
    known = {"apiVersion", "kind", "namespace", "resources", "images", "patches"}
    assert set(k) <= known, f"{path}: kustomization fields this renderer does not handle: {set(k) - known}"
    objs = []
    for res in k.get("resources", []):
        p = (path / res).resolve()
        objs += render_kustomization(p) if p.is_dir() else [o for o in yaml.safe_load_all(p.read_text()) if o]
    for patch in k.get("patches", []):
        assert set(patch) == {"path"}, f"{path}: only patches by path are handled: {patch}"
        for pdoc in yaml.safe_load_all((path / patch["path"]).read_text()):
            hits = [i for i, o in enumerate(objs)
                    if o["kind"] == pdoc["kind"] and o["metadata"]["name"] == pdoc["metadata"]["name"]]
            assert len(hits) == 1, f"{path}: patch {patch['path']} matches {len(hits)} objects"
            objs[hits[0]] = strategic_merge(objs[hits[0]], pdoc)
    if "namespace" in k:
        for o in objs:
            if o["kind"] == "Namespace":
                o["metadata"]["name"] = k["namespace"]
            elif o["kind"] not in CLUSTER_SCOPED:
                o["metadata"]["namespace"] = k["namespace"]
    for img in k.get("images", []):
        for o in objs:
            for spec in pod_specs(o):
                for c in spec.get("containers", []) + spec.get("initContainers", []):
                    name, tag = re.fullmatch(r"([^:@]+(?::\d+/[^:@]+)?)(?::([^@]+))?", c["image"]).groups()
                    if name == img["name"]:
                        c["image"] = img.get("newName", name) + ":" + str(img.get("newTag", tag or "latest"))
    return objs


def keyed(objs):
    return {(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]): o for o in objs}


_rendered = {}


def rendered(kdir):
    """kubectl kustomize when kubectl exists (kustomize built in), else render_kustomization."""
    if kdir not in _rendered:
        kubectl = shutil.which("kubectl")
        if kubectl:
            r = subprocess.run([kubectl, "kustomize", str(K8S / kdir)], capture_output=True, text=True, timeout=120)
            assert r.returncode == 0, f"kubectl kustomize {kdir}:\n{r.stderr}"
            _rendered[kdir] = [o for o in yaml.safe_load_all(r.stdout) if o]
        else:
            _rendered[kdir] = render_kustomization(K8S / kdir)
    return _rendered[kdir]


@pytest.mark.parametrize("kdir", KUSTOMIZATIONS)
def test_own_renderer_matches_kubectl_kustomize(kdir):
    if not shutil.which("kubectl"):
        pytest.skip("kubectl not installed: the manifests are rendered by this file's own renderer")
    mine, theirs = keyed(render_kustomization(K8S / kdir)), keyed(rendered(kdir))
    assert sorted(mine) == sorted(theirs)
    for key in theirs:
        assert mine[key] == theirs[key], f"{kdir}: {key} differs from kubectl kustomize"


def validate_with_schemas(entries):
    node = need_tool("node")
    if not (ROOT / "test/deploy/node_modules/kubernetes-models").is_dir():
        pytest.fail("test/deploy/node_modules missing: run scripts/setup (npm ci in test/deploy)", pytrace=False)
    r = subprocess.run([node, str(ROOT / "test/deploy/validate_k8s.mjs")], input=json.dumps(entries),
                       capture_output=True, text=True, timeout=120, cwd=ROOT / "test/deploy")
    return r.returncode, r.stdout + r.stderr


def test_kubernetes_objects_match_the_schemas():
    entries = []
    for f in sorted(K8S.rglob("*.yaml")):
        if f.name == "kustomization.yaml" or "overlays" in f.parts:
            continue  # overlay patches are partial objects: checked once rendered
        for o in yaml.safe_load_all(f.read_text()):
            if o:
                entries.append({"source": str(f.relative_to(ROOT)), "object": o})
    for kdir in KUSTOMIZATIONS:
        entries += [{"source": f"kustomize:{kdir}", "object": o} for o in rendered(kdir)]
    kinds = {e["object"]["kind"] for e in entries}
    assert {"Deployment", "Service", "PodDisruptionBudget", "ServiceMonitor", "ConfigMap"} <= kinds
    rc, out = validate_with_schemas(entries)
    assert rc == 0, "\n".join(ln for ln in out.splitlines() if not ln.startswith("ok "))
    assert out.count("\nok ") + out.startswith("ok ") == len(entries), out


def test_schema_validator_refuses_mistakes():
    """The validator is not a rubber stamp: a wrong type and an unknown field are refused."""
    dep = copy.deepcopy(next(o for o in rendered("base") if o["kind"] == "Deployment"))
    typo = copy.deepcopy(dep)
    typo["spec"]["replica"] = typo["spec"].pop("replicas")
    wrong_type = copy.deepcopy(dep)
    wrong_type["spec"]["replicas"] = "two"
    rc, out = validate_with_schemas([{"source": "typo", "object": typo}, {"source": "type", "object": wrong_type}])
    assert rc == 1, out
    assert "unknown field(s) /spec/replica" in out and "replicas must be integer" in out, out


def by_kind(objs, kind):
    return {o["metadata"]["name"]: o for o in objs if o["kind"] == kind}


def selects(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def container_port(container, port):
    """A probe's or Service's port (number or name) -> the container port number."""
    if isinstance(port, int):
        return port
    return next(p["containerPort"] for p in container["ports"] if p.get("name") == port)


@pytest.mark.parametrize("kdir", KUSTOMIZATIONS)
def test_kubernetes_wiring(kdir):
    objs = rendered(kdir)
    deployments, services = by_kind(objs, "Deployment"), by_kind(objs, "Service")
    configmaps = by_kind(objs, "ConfigMap")

    # ramjet: replicas, probes, security, resources.
    rj = deployments["ramjet"]
    assert rj["spec"]["replicas"] >= 2
    pod = rj["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    ready, live = c["readinessProbe"], c["livenessProbe"]
    assert ready["httpGet"]["path"] == "/health" and container_port(c, ready["httpGet"]["port"]) in (8000, 9090)
    assert "httpGet" not in live or live["httpGet"]["path"] != "/health", \
        "liveness must not use /health: it answers 503 whenever no engine is healthy"
    assert container_port(c, (live.get("tcpSocket") or live.get("httpGet"))["port"]) in (8000, 9090)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert {"cpu", "memory"} <= set(c["resources"]["requests"]) and {"cpu", "memory"} <= set(c["resources"]["limits"])
    pod_labels = rj["spec"]["template"]["metadata"]["labels"]
    assert selects(rj["spec"]["selector"]["matchLabels"], pod_labels)

    # The config file: RJ_CONFIG_FILE is a key of a mounted ConfigMap.
    env = {e["name"]: e.get("value") for e in c.get("env", [])}
    cfg_path = Path(env["RJ_CONFIG_FILE"])
    mount = next(m for m in c["volumeMounts"] if cfg_path.parent == Path(m["mountPath"]))
    assert "subPath" not in mount, "a subPath mount never sees ConfigMap updates (no reload)"
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    config = env_file(configmaps[volume["configMap"]["name"]]["data"][cfg_path.name])
    assert not set(env) - {"RJ_CONFIG_FILE"} & set(config), "a name set twice"

    # Engines from DNS: each name is a headless Service in this namespace, one profile each.
    namespace = rj["metadata"].get("namespace", "default")
    dns = items(config["RJ_UPSTREAM_DNS"])
    profiles = items(config["RJ_UPSTREAM_PROFILES"])
    assert len(dns) == len(profiles) == 2 and sorted(profiles) == ["mtp", "standard"]
    live_ep, replay_ep = config["RJ_KV_EVENT_LIVE_ENDPOINTS"], config["RJ_KV_EVENT_REPLAY_ENDPOINTS"]
    assert config["RJ_EXACT_ROUTE_MODE"] == "on"
    for item, profile in zip(dns, profiles):
        m = re.fullmatch(r"(?:https?://)?([a-z0-9-]+)\.([a-z0-9-]+)\.svc\.cluster\.local:(\d+)", item)
        assert m, f"RJ_UPSTREAM_DNS item {item!r} is not a Service FQDN with a port"
        name, ns, port = m.group(1), m.group(2), int(m.group(3))
        assert ns == namespace, f"{item}: the Services live in {namespace}"
        svc = services[name]
        assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"] is False
        assert {8000, 5557, 5558} <= {p["port"] for p in svc["spec"]["ports"]}
        engines = [d for d in deployments.values()
                   if selects(svc["spec"]["selector"], d["spec"]["template"]["metadata"]["labels"])]
        assert len(engines) == 1, f"Service {name} selects {len(engines)} Deployments"
        (eng,) = engines[0]["spec"]["template"]["spec"]["containers"]
        args = eng["args"]
        assert flag_values(args, "--port") == [str(port)] and "--enable-prefix-caching" in args
        assert is_mtp_engine(args) == (profile == "mtp"), f"{name} is declared {profile}"
        live_port, replay_port, topic = check_kv_events_config(args, f"{kdir}:{name}")
        assert live_ep == f"tcp://*:{live_port}" and replay_ep == f"tcp://*:{replay_port}"
        assert config.get("RJ_KV_EVENT_TOPIC", "") == topic
        assert {live_port, replay_port, port} <= {p["containerPort"] for p in eng["ports"]}
        svc_targets = {container_port(eng, p.get("targetPort", p["port"])) for p in svc["spec"]["ports"]}
        assert {live_port, replay_port, port} <= svc_targets
        assert eng["readinessProbe"]["httpGet"]["path"] == "/health"
        assert int(eng["resources"]["limits"]["nvidia.com/gpu"]) >= 1
        assert re.fullmatch(r"vllm/vllm-openai:v\d+\.\d+\.\d+", eng["image"])

    # Client Service, PDB, ServiceMonitor all point at the ramjet pods / Service.
    client = services["ramjet"]
    assert selects(client["spec"]["selector"], pod_labels)
    ports = {p["name"]: p for p in client["spec"]["ports"]}
    assert ports["http"]["port"] == 8000 and ports["metrics"]["port"] == 9090
    assert all(container_port(c, p["targetPort"]) == p["port"] for p in ports.values())
    (pdb,) = by_kind(objs, "PodDisruptionBudget").values()
    assert pdb["spec"]["minAvailable"] == 1 and selects(pdb["spec"]["selector"]["matchLabels"], pod_labels)
    (sm,) = by_kind(objs, "ServiceMonitor").values()
    assert selects(sm["spec"]["selector"]["matchLabels"], client["metadata"]["labels"])
    assert all(e["port"] in ports for e in sm["spec"]["endpoints"])
    assert ports[sm["spec"]["endpoints"][0]["port"]]["port"] == 9090


# ------------------------------------------------------------------------- names in the docs

def readme_section(title):
    text = (ROOT / "README.md").read_text()
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    return m.group(1) if m else ""


def rj_names_in_use():
    """{name: [where, ...]} over every file of deploy/ and README's deployment sections."""
    used = {}
    for f in sorted(DEPLOY.rglob("*")):
        if f.is_file():
            for n in RJ_NAME.findall(f.read_text(errors="replace")):
                used.setdefault(n, set()).add(str(f.relative_to(ROOT)))
    for title in ("Run it with Compose", "Run it on Kubernetes"):
        for n in RJ_NAME.findall(readme_section(title)):
            used.setdefault(n, set()).add(f"README.md#{title}")
    return used


def undocumented(used, documented):
    bad = []
    for name, places in sorted(used.items()):
        if name in documented:
            continue
        bad.extend(f"{name} ({where})" for where in sorted(places))
    return bad


def test_rj_names_are_documented():
    used = rj_names_in_use()
    assert {"RJ_UPSTREAM", "RJ_UPSTREAM_PROFILES", "RJ_UPSTREAM_DNS", "RJ_CONFIG_FILE"} <= set(used)
    bad = undocumented(used, documented_rj_names())
    assert not bad, "RJ_* names not in docs/configuration.md: " + ", ".join(bad)


def test_rj_name_check_catches_a_typo():
    documented = {"RJ_UPSTREAM", "RJ_UPSTREAM_PROFILES"}
    used = {"RJ_UPSTREAM_PROFILE": {"deploy/compose/compose.yaml"},
            "RJ_UPSTREAM_DNS": {"deploy/compose/compose.yaml", "deploy/kubernetes/base/ramjet-config.yaml"},
            "RJ_CONFIG_FILE": {"README.md#Run it on Kubernetes"},
            "RJ_UPSTREAM": {"deploy/compose/compose.yaml"}}
    assert undocumented(used, documented) == [
        "RJ_CONFIG_FILE (README.md#Run it on Kubernetes)", "RJ_UPSTREAM_DNS (deploy/compose/compose.yaml)",
        "RJ_UPSTREAM_DNS (deploy/kubernetes/base/ramjet-config.yaml)",
        "RJ_UPSTREAM_PROFILE (deploy/compose/compose.yaml)"]


def dashboard_metric_names(dash):
    """Every ramjet_* name in the dashboard's queries (expr, templating), as written."""
    texts = []

    def walk(v, key=None):
        if isinstance(v, dict):
            for k, x in v.items():
                walk(x, k)
        elif isinstance(v, list):
            for x in v:
                walk(x, key)
        elif isinstance(v, str) and key in ("expr", "query", "definition"):
            texts.append(v)

    walk(dash)
    return {n for t in texts for n in re.findall(r"\bramjet_[a-z0-9_]+", t)}, texts


def unknown_metrics(names, families):
    bad = []
    for n in sorted(names):
        base = re.sub(r"_(bucket|sum|count)$", "", n)
        if n in families and families[n] != "histogram":
            continue
        if base != n and families.get(base) == "histogram":
            continue
        bad.append(n)
    return bad


def test_dashboard_queries_documented_metrics():
    dash = json.loads((DEPLOY / "grafana/ramjet-dashboard.json").read_text())
    names, texts = dashboard_metric_names(dash)
    assert len(names) > 30, names
    bad = unknown_metrics(names, documented_metrics())
    assert not bad, "dashboard metrics not in docs/metrics.md (or a histogram queried without _bucket): " + ", ".join(bad)
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for p in dash["panels"]:
        for t in p.get("targets", []):
            assert t["datasource"]["uid"] == "${DS_PROMETHEUS}", p["title"]
            assert t["expr"].count("(") == t["expr"].count(")"), t["expr"]
    wanted = {"ramjet_requests_total", "ramjet_ttft_seconds_bucket", "ramjet_cached_prompt_tokens_total",
              "ramjet_upstream_load_units", "ramjet_upstream_inflight", "ramjet_upstream_state",
              "ramjet_route_decisions_total", "ramjet_kv_state", "ramjet_upstream_ejections_total",
              "ramjet_upstream_tls_failures_total", "ramjet_client_auth_total"}
    assert wanted <= names, wanted - names


def test_dashboard_check_catches_unknown_metrics():
    fams = documented_metrics()
    assert unknown_metrics({"ramjet_ttft_seconds_bucket", "ramjet_requests_total"}, fams) == []
    assert unknown_metrics({"ramjet_request_total", "ramjet_requests_total_bucket", "ramjet_ttft_seconds"}, fams) == [
        "ramjet_request_total", "ramjet_requests_total_bucket", "ramjet_ttft_seconds"]


# ---------------------------------------------------------------------------------- the image

def dockerfile_stages():
    """[(FROM line, text of the stage)] with line continuations joined."""
    text = (DEPLOY / "Dockerfile").read_text().replace("\\\n", " ")
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("#")]
    stages, cur = [], None
    for ln in lines:
        if ln.startswith("FROM "):
            cur = [ln, []]
            stages.append(cur)
        elif cur:
            cur[1].append(ln)
    return [(f, "\n".join(body)) for f, body in stages]


def apt_packages(stage_text):
    pkgs = []
    for m in re.finditer(r"apt-get install ([^&]*)", stage_text):
        pkgs += [w for w in m.group(1).split() if not w.startswith("-")]
    return pkgs


def setup_build_pkgs():
    text = (ROOT / "scripts/setup").read_text()
    return re.search(r"build_pkgs=\((.*?)\)", text, re.S).group(1).split()


def test_dockerfile_shape():
    (build_from, build), (run_from, run) = dockerfile_stages()
    assert build_from.startswith("FROM debian:12 ") and run_from == "FROM debian:12-slim"
    missing = set(setup_build_pkgs()) - set(apt_packages(build))
    assert not missing, f"build stage lacks scripts/setup build packages: {missing}"
    assert not {"libboost-all-dev", "libboost-dev"} & set(apt_packages(build))
    # PGO=1 (the default) builds with scripts/build-pgo, PGO=0 with the release preset; both into
    # build/image, where the binaries are copied from.
    assert re.search(r"^ARG PGO=1$", build, re.M)
    assert "PGO_BUILD_DIR=build/image" in build and "scripts/build-pgo" in build
    assert "cmake --preset release -B build/image" in build and "--target ramjet ramjet-sim" in build
    pgo = (ROOT / "scripts/build-pgo").read_text()
    assert "--target ramjet ramjet-sim ramjet-companion" in pgo and '-DRAMJET_COMMIT="${RAMJET_COMMIT:-}"' in pgo
    assert "build/image/src/app/ramjet " in build and "build/image/sim/server/ramjet-sim " in build
    assert "ramjet_executable(ramjet " in (ROOT / "src/app/CMakeLists.txt").read_text()
    assert "ramjet_executable(ramjet-sim " in (ROOT / "sim/server/CMakeLists.txt").read_text()
    assert re.search(r"^USER 10001", run, re.M) and re.search(r"useradd .*--uid 10001", run)
    assert re.search(r"^EXPOSE 8000 9090$", run, re.M)
    assert re.search(r"^HEALTHCHECK .*/health", run, re.M)
    assert re.search(r'^ENTRYPOINT \["/usr/local/bin/ramjet"\]$', run, re.M)
    ignore = (ROOT / ".dockerignore").read_text().split()
    # (.venv: scripts/test's vLLM, about 6 GB, is no part of the image's sources)
    assert {".git", "build", ".venv", "**/node_modules"} <= set(ignore)


def binaries_for_ldd():
    """The release binaries the image is built from; else the configured test binaries."""
    release = [ROOT / "build/release/src/app/ramjet", ROOT / "build/release/sim/server/ramjet-sim"]
    if all(p.is_file() for p in release):
        return release
    env = [Path(os.environ[v]) for v in ("RAMJET_BIN", "SIM_BIN") if os.environ.get(v)]
    return [p for p in env if p.is_file()]


def package_of(lib):
    for cand in dict.fromkeys([str(Path(lib).resolve()), lib, lib.replace("/lib/", "/usr/lib/", 1)]):
        r = subprocess.run(["dpkg", "-S", cand], capture_output=True, text=True)
        if r.returncode == 0:
            return r.stdout.split(":")[0].strip()
    return None


def dependency_closure(pkgs):
    """Installed packages reachable from pkgs through Depends/Pre-Depends (every alternative)."""
    r = subprocess.run(["dpkg-query", "-W", "-f", "${Package}\t${Pre-Depends}, ${Depends}\n"],
                       capture_output=True, text=True, check=True)
    deps = {}
    for line in r.stdout.splitlines():
        name, _, rest = line.partition("\t")
        deps[name] = set(re.findall(r"(?:^|[,|]\s*)([a-z0-9][a-z0-9+.-]+)", rest))
    seen, todo = set(), list(pkgs)
    while todo:
        p = todo.pop()
        if p not in seen:
            seen.add(p)
            todo += deps.get(p, ())
    return seen


def ldd_packages(binary):
    r = subprocess.run(["flock", "-s", "-w", "600", "/tmp/ramjet-build.lock", "ldd", str(binary)],
                       capture_output=True, text=True, timeout=700)
    assert r.returncode == 0, r.stderr
    out = {}
    for lib in re.findall(r"=> (/\S+)", r.stdout):
        if re.search(r"/lib(asan|ubsan|tsan|lsan)\.so", lib):
            continue  # sanitizer runtimes of a dev/tsan build, never in the release image
        out[lib] = package_of(lib)
    return out


def uncovered(binaries, runtime_pkgs):
    have = dependency_closure(runtime_pkgs)
    bad = []
    for b in binaries:
        for lib, pkg in ldd_packages(b).items():
            if pkg is None or pkg not in have:
                bad.append(f"{b.name}: {lib} ({pkg or 'no package'})")
    return bad


def test_runtime_packages_cover_the_binaries():
    bins = binaries_for_ldd()
    if not bins:
        pytest.skip("no built ramjet/ramjet-sim to run ldd on")
    (_, _), (_, run) = dockerfile_stages()
    pkgs = apt_packages(run)
    assert pkgs, "runtime stage installs no packages"
    bad = uncovered(bins, pkgs)
    assert not bad, "runtime stage misses the packages of: " + "; ".join(bad)
    # and the check itself bites: without libzmq5 the ZeroMQ library is uncovered
    assert any("libzmq" in b for b in uncovered(bins[:1], [p for p in pkgs if p != "libzmq5"]))
