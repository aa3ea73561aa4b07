// nlohmann-json rendering shared by obs' own .cc files (metrics lines, trace
// events). Include it from .cc files only: it pulls in <nlohmann/json.hpp>.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "gradmesh/obs/json_object.h"

namespace gradmesh::obs {

// ordered_json: fields stay in the order they were added, as a reader expects
// ("type" first in a metrics line).
using Json = nlohmann::ordered_json;

Json to_json(const JsonObject& object);

// Compact, one line, by the rules in json_object.h (non-finite -> null,
// invalid UTF-8 -> U+FFFD); never throws for the content.
std::string dump_json(const Json& value);

}  // namespace gradmesh::obs
