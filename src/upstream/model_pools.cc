#include "upstream/model_pools.h"

#include <algorithm>
#include <bit>

#include "common/json.h"

namespace ramjet::upstream {

bool EngineSet::empty() const {
  return std::all_of(words_.begin(), words_.end(), [](uint64_t w) { return w == 0; });
}

size_t EngineSet::count() const {
  size_t n = 0;
  for (uint64_t w : words_) n += static_cast<size_t>(std::popcount(w));
  return n;
}

namespace {

// The card of a declared model no engine described.
std::string declared_card(std::string_view id) {
  std::string out = R"({"id":)";
  append_json_string(out, id);
  out += R"(,"object":"model","created":0,"owned_by":"ramjet","root":)";
  append_json_string(out, id);
  out += R"(,"parent":null})";
  return out;
}

}  // namespace

std::shared_ptr<const ModelPools> ModelPools::build(const std::vector<EngineModels>& engines,
                                                     std::vector<std::string>& labels) {
  auto out = std::make_shared<ModelPools>();
  std::unordered_map<std::string, uint32_t> at;  // id -> models_ index
  std::vector<uint64_t> context;                 // per model: its card's max_model_len (0: none)
  auto add = [&](const std::string& id, const ModelCard* card, size_t engine) {
    auto [it, fresh] = at.try_emplace(id, static_cast<uint32_t>(out->models_.size()));
    if (fresh) {
      Model m;
      m.id = id;
      m.adapter = card != nullptr && card->adapter;
      m.base = m.adapter ? card->parent : id;
      m.card = card != nullptr ? card->card : declared_card(id);
      out->models_.push_back(std::move(m));
      context.push_back(card != nullptr ? card->max_model_len : 0);
    } else if (card != nullptr && card->max_model_len != 0 &&
               (context[it->second] == 0 || card->max_model_len < context[it->second])) {
      // Engines that disagree about a model's context: the merged card promises the smallest.
      out->models_[it->second].card = card->card;
      context[it->second] = card->max_model_len;
    }
    out->models_[it->second].engines.add(engine);
  };
  for (size_t i = 0; i < engines.size(); ++i) {
    const EngineModels& e = engines[i];
    if (!e.active) continue;
    if (e.declared.empty() && !e.cards) {
      out->unlisted_.add(i);
      continue;
    }
    ++out->listed_;
    if (e.declared.empty()) {
      for (const ModelCard& c : *e.cards) add(c.id, &c, i);
      continue;
    }
    // Declared: those names, described by the engine's own cards when it lists them, and the
    // adapters it lists on a declared model (an adapter follows its base model).
    for (const std::string& name : e.declared) {
      const ModelCard* card = nullptr;
      if (e.cards) {
        for (const ModelCard& c : *e.cards) {
          if (c.id == name) card = &c;
        }
      }
      add(name, card, i);
    }
    if (e.cards) {
      for (const ModelCard& c : *e.cards) {
        if (c.adapter && std::find(e.declared.begin(), e.declared.end(), c.parent) != e.declared.end() &&
            std::find(e.declared.begin(), e.declared.end(), c.id) == e.declared.end()) {
          add(c.id, &c, i);
        }
      }
    }
  }
  std::vector<std::string_view> bases;
  for (Model& m : out->models_) {
    if (std::find(bases.begin(), bases.end(), m.base) == bases.end()) bases.push_back(m.base);
    auto slot = std::find(labels.begin(), labels.end(), m.base);
    if (slot == labels.end() && labels.size() < kMaxModelLabels) slot = labels.insert(labels.end(), m.base);
    m.label = static_cast<uint32_t>(slot == labels.end() ? kMaxModelLabels : slot - labels.begin());
  }
  out->bases_ = bases.size();
  for (Model& m : out->models_) {
    m.pool = m.engines;
    if (out->bases_ <= 1) {
      for (size_t i = 0; i < engines.size(); ++i) {
        if (out->unlisted_.has(i)) m.pool.add(i);
      }
    }
  }
  for (uint32_t k = 0; k < out->models_.size(); ++k) out->by_id_.emplace(out->models_[k].id, k);
  out->rotations_ = std::make_unique<std::atomic<uint64_t>[]>(out->models_.size());
  return out;
}

ModelPools::Pick ModelPools::pick(std::optional<std::string_view> model) const {
  if (listed_ == 0) return {};
  if (!model) return {bases_ <= 1 ? Verdict::kAny : Verdict::kAmbiguous};
  if (auto it = by_id_.find(*model); it != by_id_.end() && !models_[it->second].engines.empty()) {
    const Model& m = models_[it->second];
    return {Verdict::kServed, &m.pool, &m, &rotations_[it->second]};
  }
  if (!unlisted_.empty()) return {Verdict::kUnlisted, &unlisted_};
  return {Verdict::kUnknown};
}

std::optional<std::string> ModelPools::models_json() const {
  if (listed_ == 0) return std::nullopt;
  std::string out = R"({"object":"list","data":[)";
  for (size_t k = 0; k < models_.size(); ++k) {
    if (k) out += ',';
    out += models_[k].card;
  }
  out += "]}";
  return out;
}

std::string ModelPools::engine_models(size_t engine) const {
  std::string out;
  for (const Model& m : models_) {
    if (m.adapter || !m.engines.has(engine)) continue;
    if (!out.empty()) out += ", ";
    out += m.id;
  }
  return out;
}

}  // namespace ramjet::upstream
