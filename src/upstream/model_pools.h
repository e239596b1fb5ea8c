// upstream/model_pools: which engines serve which model. A request is routed only among the
// engines that serve its `model` (its pool); ramjet answers GET /v1/models itself with the
// engines' cards merged; metrics group engines and requests by model.
//
// An engine's models are the names the operator declared for it (RJ_UPSTREAM_MODELS) or, without
// a declaration, what its own GET /v1/models lists (the served model and its LoRA adapters:
// upstream/engine_catalog.h polls it). `ModelPools` is an immutable snapshot, rebuilt by the
// catalog whenever one engine's list changes and read by each request without a lock.
//
// Which engines a request may go to (pick()):
//   a model some listed engine serves           -> those engines (kServed), and the engines whose
//                                                  list is not known yet while every listed engine
//                                                  serves one base model (a fleet of one model:
//                                                  an engine that has not answered yet, or cannot,
//                                                  is not left idle; with several models it
//                                                  could be another model's);
//   a model no listed engine serves             -> the engines whose list is not known yet
//                                                  (kUnlisted: they may serve it, and say so),
//                                                  or, when every engine's list is known, none
//                                                  (kUnknown: ramjet answers 404 itself);
//   no `model` in the body                      -> every engine while the fleet serves one base
//                                                  model (vLLM serves its own), else kAmbiguous
//                                                  (a 400: the client must name one);
//   nothing known yet (no engine listed)        -> every engine (kAny).
// Model names are never logged; as metric labels only the base models the engines list or the
// operator declared appear (at most kMaxModelLabels; further ones share the label `_other`).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "upstream/catalog_decode.h"

namespace ramjet::upstream {

// A set of engine ordinals (slots).
class EngineSet {
 public:
  bool has(size_t i) const { return i / 64 < words_.size() && ((words_[i / 64] >> (i % 64)) & 1u) != 0; }
  void add(size_t i) {
    if (i / 64 >= words_.size()) words_.resize(i / 64 + 1, 0);
    words_[i / 64] |= uint64_t{1} << (i % 64);
  }
  bool empty() const;
  size_t count() const;

 private:
  std::vector<uint64_t> words_;
};

inline constexpr size_t kMaxModelLabels = 64;

// One engine's models as the catalog knows them.
struct EngineModels {
  bool active = false;                       // the slot holds an active engine
  std::vector<std::string> declared{};       // RJ_UPSTREAM_MODELS (empty: learn from the engine)
  std::optional<std::vector<ModelCard>> cards{};  // its last /v1/models answer (nullopt: none yet)
};

class ModelPools {
 public:
  struct Model {
    std::string id;
    std::string base;      // the id, or an adapter's base model
    bool adapter = false;
    EngineSet engines;     // the active engines that serve it
    EngineSet pool;        // engines, plus the unlisted ones in a fleet of one base model
    std::string card;      // its /v1/models card (compact JSON)
    uint32_t label = 0;    // the base model's metric label slot (ModelPools::labels)
  };
  enum class Verdict : uint8_t { kAny, kServed, kUnlisted, kUnknown, kAmbiguous };
  struct Pick {
    Verdict verdict = Verdict::kAny;
    const EngineSet* engines = nullptr;  // kServed, kUnlisted: the pool; otherwise null (every engine)
    const Model* model = nullptr;        // kServed: the model
    std::atomic<uint64_t>* rotation = nullptr;  // kServed: the model's tie-break counter
  };

  // `labels`: the base models' metric labels in slot order, as the caller keeps them across
  // rebuilds (a new base model is appended while there is room). The result's models carry
  // their slot (kMaxModelLabels: `_other`).
  static std::shared_ptr<const ModelPools> build(const std::vector<EngineModels>& engines,
                                                  std::vector<std::string>& labels);

  // `model`: the body's model name (nullopt: the body names none).
  Pick pick(std::optional<std::string_view> model) const;

  // GET /v1/models as ramjet answers it: {"object":"list","data":[...]}, every model once (first
  // listed first; of several engines' cards for one id, the one with the smallest context), a
  // declared model no engine described gets a card of its own. nullopt while no engine is listed.
  std::optional<std::string> models_json() const;

  const std::vector<Model>& models() const { return models_; }
  size_t base_models() const { return bases_; }
  // The base models an engine serves, their names joined with ", " ("" while its list is not
  // known: the dashboard).
  std::string engine_models(size_t engine) const;

 private:
  std::vector<Model> models_;
  // Per model: the rotation that breaks ties among its pool's engines (routing's; mutable in an
  // otherwise immutable snapshot, reset when the snapshot is rebuilt).
  std::unique_ptr<std::atomic<uint64_t>[]> rotations_;
  std::unordered_map<std::string_view, uint32_t> by_id_;  // views into models_[].id
  EngineSet unlisted_;
  size_t listed_ = 0;  // active engines whose models are known
  size_t bases_ = 0;   // distinct base models
};

}  // namespace ramjet::upstream
