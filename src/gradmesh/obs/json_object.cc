#include "gradmesh/obs/json_object.h"

#include <cstdio>

#include "gradmesh/obs/json_dump.h"

namespace gradmesh::obs {

JsonObject& JsonObject::set(const std::string& key, Value value) {
  for (auto& field : fields_) {
    if (field.first == key) {
      field.second = std::move(value);
      return *this;
    }
  }
  fields_.emplace_back(key, std::move(value));
  return *this;
}

std::string JsonObject::str() const { return dump_json(to_json(*this)); }

Json to_json(const JsonObject& object) {
  Json out = Json::object();
  for (const auto& [key, value] : object.fields()) {
    // nlohmann writes NaN and infinities as null.
    std::visit(
        [&out, &key = key](const auto& v) {
          if constexpr (std::is_same_v<std::decay_t<decltype(v)>, std::shared_ptr<const JsonObject>>)
            out[key] = to_json(*v);
          else
            out[key] = v;
        },
        value);
  }
  return out;
}

std::string dump_json(const Json& value) { return value.dump(-1, ' ', false, Json::error_handler_t::replace); }

std::string json_escape(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20 || c == 0x7f) {  // DEL too, so the result is also a valid TOML basic string
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out;
}

}  // namespace gradmesh::obs
