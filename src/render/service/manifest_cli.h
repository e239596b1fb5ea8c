// render::manifest_cli: `ramjet manifest` writes a tokenizer compatibility manifest
// (render/identity/manifest.h) from a live engine's answers: its identity from GET /v1/models and
// GET /version, and for each golden request the token count and digest of the engine's own POST
// /tokenize, after checking that ramjet's render + encode reproduces them (so the manifest it
// prints is one ramjet will accept at startup). Needs no RJ_* configuration except an optional
// RJ_UPSTREAM_TOKEN. Usage: `ramjet manifest --help`.
#pragma once

namespace ramjet::render::manifest_cli {

// argv[0] is "manifest". Exit status: 0 ok, 2 bad arguments or files, 1 disagreement/failure.
int run(int argc, char** argv);

}  // namespace ramjet::render::manifest_cli
