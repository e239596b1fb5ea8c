// Validates Kubernetes objects against the Kubernetes JSON schemas (kubernetes-models) and the
// prometheus-operator CRD schemas (@kubernetes-models/prometheus-operator), offline.
// Input: a JSON array of objects on stdin, each {"source": "<where it came from>", "object": {...}}.
// The schemas do not forbid unknown fields (the API server does, with strict field validation),
// so every field the schema validator never reads is reported too: the object is validated
// through a Proxy that records each property read, and any own property left unread is unknown
// to the schema (a typo such as "replica:" or a field at the wrong level).
// Output: one line per object, "ok <source> <kind>/<name>" or "error <source> <kind>/<name>: <why>";
// exit status 1 when any object is invalid or of an unknown apiVersion/kind.
import { readFileSync } from "node:fs";

// apiVersion -> module that exports one class per kind.
function moduleFor(apiVersion) {
  if (apiVersion === "monitoring.coreos.com/v1") {
    return "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1";
  }
  return "kubernetes-models/" + apiVersion;  // "v1", "apps/v1", "policy/v1", ...
}

function watched(value, path, read) {
  if (value === null || typeof value !== "object") return value;
  return new Proxy(value, {
    get(target, key, receiver) {
      if (typeof key === "string") read.add(path + "/" + key);
      return watched(Reflect.get(target, key, receiver), path + "/" + String(key), read);
    },
  });
}

function unread(value, path, read, out) {
  if (value === null || typeof value !== "object") return out;
  for (const key of Object.keys(value)) {
    const p = path + "/" + key;
    if (!Array.isArray(value) && !read.has(p)) out.push(p);  // its subtree is unknown too
    else unread(value[key], p, read, out);
  }
  return out;
}

const items = JSON.parse(readFileSync(0, "utf8"));
let failed = 0;
for (const { source, object } of items) {
  const what = `${source} ${object?.kind}/${object?.metadata?.name}`;
  let Model;
  try {
    Model = (await import(moduleFor(String(object.apiVersion))))[object.kind];
  } catch (e) {
    Model = undefined;
  }
  if (typeof Model !== "function") {
    console.log(`error ${what}: unknown apiVersion/kind ${object?.apiVersion} ${object?.kind}`);
    failed++;
    continue;
  }
  try {
    const plain = new Model(object).toJSON();
    const read = new Set();
    Model.prototype.validate.call(watched(plain, "", read));
    const unknown = unread(plain, "", read, []);
    if (unknown.length) throw new Error("unknown field(s) " + unknown.join(", "));
    console.log(`ok ${what}`);
  } catch (e) {
    console.log(`error ${what}: ${String(e.message).replace(/\s+/g, " ")}`);
    failed++;
  }
}
process.exit(failed ? 1 : 0);
