// Append-only JSON Lines file: one object per line, flushed per line so a
// crash loses at most the line being written and `tail -f` shows progress.
#pragma once

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace gradmesh::obs {

// A flat JSON object built field by field (numbers, strings, bools).
class JsonObject {
 public:
  JsonObject& add(const std::string& key, double value);
  JsonObject& add(const std::string& key, int64_t value);
  JsonObject& add(const std::string& key, int value) { return add(key, static_cast<int64_t>(value)); }
  JsonObject& add(const std::string& key, const std::string& value);
  JsonObject& add(const std::string& key, const char* value) { return add(key, std::string(value)); }
  JsonObject& add(const std::string& key, bool value);
  std::string str() const { return "{" + body_ + "}"; }

 private:
  void key(const std::string& k);
  std::string body_;
};

// Escapes for a JSON string body; the result is also a valid TOML basic-string body.
std::string json_escape(const std::string& s);

class JsonlWriter {
 public:
  explicit JsonlWriter(const std::string& path);  // creates or truncates; Error(kIo) naming the path
  ~JsonlWriter();
  JsonlWriter(const JsonlWriter&) = delete;
  JsonlWriter& operator=(const JsonlWriter&) = delete;
  void write(const JsonObject& object);

 private:
  std::string path_;
  std::FILE* file_;
};

}  // namespace gradmesh::obs
