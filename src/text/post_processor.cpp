#include "post_processor.h"

#include <fmt/format.h>

#include <string>

namespace moe::text {

void PostProcessor::parse(const Json& j, const JsonSource& source, const Vocabulary& vocab) {
  if (j.is_null()) return;
  const auto type = source.need(j, "type", "post_processor").get<std::string>();
  if (type == "Sequence") {
    for (const Json& p : source.need(j, "processors", "post_processor Sequence")) parse(p, source, vocab);
  } else if (type == "ByteLevel") {
    // Offsets only: adds no token.
  } else if (type == "TemplateProcessing") {
    bool seen_sequence = false;
    for (const Json& item : source.need(j, "single", "post_processor TemplateProcessing")) {
      if (item.contains("Sequence")) {
        seen_sequence = true;
      } else if (item.contains("SpecialToken")) {
        const auto name = item.at("SpecialToken").at("id").get<std::string>();
        std::vector<int32_t> ids;
        const Json& specials = j.value("special_tokens", Json::object());
        if (specials.contains(name)) {
          for (const Json& id : specials.at(name).at("ids")) {
            const auto value = static_cast<int32_t>(
                json_int(id, 0, vocab.max_id(), fmt::format("special token '{}' id", name)));
            if (!vocab.contains(value))
              source.fail(
                  fmt::format("post_processor special token '{}' has id {}, which is not in the vocabulary",
                              name, value));
            ids.push_back(value);
          }
        } else {
          const int32_t id = vocab.id_of(name);
          if (id < 0)
            source.fail(fmt::format("post_processor names token '{}' that is not in the vocabulary", name));
          ids = {id};
        }
        auto& target = seen_sequence ? suffix_ids_ : prefix_ids_;
        target.insert(target.end(), ids.begin(), ids.end());
      }
    }
  } else {
    source.fail(fmt::format(
        "unsupported post_processor type '{}' (supported: TemplateProcessing, ByteLevel, Sequence)", type));
  }
}

void PostProcessor::apply(std::vector<int32_t>& ids) const {
  ids.insert(ids.begin(), prefix_ids_.begin(), prefix_ids_.end());
  ids.insert(ids.end(), suffix_ids_.begin(), suffix_ids_.end());
}

}  // namespace moe::text
