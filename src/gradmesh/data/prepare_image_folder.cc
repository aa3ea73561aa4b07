#include "gradmesh/data/prepare_image_folder.h"

#include <xxhash.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "gradmesh/core/atomic_file.h"
#include "gradmesh/core/error.h"
#include "gradmesh/data/image_codec.h"
#include "gradmesh/data/mds.h"
#include "gradmesh/data/sample_order.h"
#include "gradmesh/data/sample_workers.h"

namespace gradmesh::data {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kStateFile = "prepare-state.json";

struct InputFile {
  std::string path;
  int64_t label = 0;
  uint64_t size = 0;
};

std::string lower_extension(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext;
}

bool image_extension(const fs::path& p) {
  const std::string ext = lower_extension(p);
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png";
}

// The classes (sorted directory names) and their image files, sorted within each class.
std::vector<InputFile> list_folder(const std::string& root, std::vector<std::string>& classes) {
  std::error_code ec;
  if (!fs::is_directory(root, ec))
    throw_error(ErrorKind::kUsage, root, "is not a directory (--image-folder names ROOT with one subdirectory per class)");
  for (const fs::directory_entry& e : fs::directory_iterator(root))
    if (e.is_directory() && e.path().filename().string()[0] != '.') classes.push_back(e.path().filename().string());
  std::sort(classes.begin(), classes.end());
  if (classes.empty())
    throw_error(ErrorKind::kUsage, root, "holds no class directories (ImageFolder layout: ROOT/<class>/<image>)");
  std::vector<InputFile> files;
  for (size_t c = 0; c < classes.size(); ++c) {
    std::vector<InputFile> found;
    const fs::path dir = fs::path(root) / classes[c];
    for (const fs::directory_entry& e :
         fs::recursive_directory_iterator(dir, fs::directory_options::follow_directory_symlink))
      if (e.is_regular_file() && image_extension(e.path()))
        found.push_back({e.path().string(), static_cast<int64_t>(c), static_cast<uint64_t>(e.file_size())});
    if (found.empty())
      throw_error(ErrorKind::kFormat, dir.string(), "holds no .jpg, .jpeg or .png file: every class needs images");
    std::sort(found.begin(), found.end(), [](const InputFile& a, const InputFile& b) { return a.path < b.path; });
    files.insert(files.end(), found.begin(), found.end());
  }
  return files;
}

// What identifies the inputs of a prepare: a resumed one must see the same.
std::string fingerprint(const std::vector<InputFile>& files, const ImageFolderOptions& o) {
  XXH64_state_t* state = XXH64_createState();
  XXH64_reset(state, o.seed);
  for (const InputFile& f : files) {
    XXH64_update(state, f.path.data(), f.path.size() + 1);
    XXH64_update(state, &f.size, sizeof f.size);
  }
  XXH64_update(state, &o.shard_bytes, sizeof o.shard_bytes);
  const uint64_t hash = XXH64_digest(state);
  XXH64_freeState(state);
  return mds_xxh64_hex(hash);
}

std::string column_encoding(const std::vector<InputFile>& files) {
  bool jpeg = false, png = false;
  for (const InputFile& f : files) (lower_extension(f.path) == ".png" ? png : jpeg) = true;
  return jpeg && png ? "bytes" : (png ? "png" : "jpeg");
}

// A file read and decoded on a worker thread: its bytes, or why it is corrupt
// ("FILE: why").
struct Checked {
  std::string bytes;
  ImageSize size;
  std::string error;
};

void check_file(const InputFile& f, Checked& out) {
  out = {};
  std::ifstream in(f.path, std::ios::binary);
  out.bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) {
    out.error = f.path + ": cannot be read";
    return;
  }
  if (static_cast<int64_t>(out.bytes.size()) > kMdsMaxSampleBytes) {
    out.error = f.path + ": " + std::to_string(out.bytes.size()) + " bytes, over the 256 MiB a sample may hold";
    return;
  }
  thread_local std::vector<uint8_t> pixels;
  try {
    out.size = decode_image(out.bytes, pixels, f.path);
  } catch (const Error& e) {
    out.error = e.what();
  }
}

struct Progress {
  int64_t done = 0;  // files whose samples are in closed shards
  std::vector<std::pair<int64_t, std::string>> skipped;  // (position, "FILE: why")
  ImageSize size;
};

void save_state(const std::string& output, const std::string& print, const Progress& p, const MdsWriter& writer) {
  json skipped = json::array();
  for (const auto& [at, why] : p.skipped)
    if (at < p.done) skipped.push_back({at, why});
  const json state = {{"fingerprint", print}, {"files_done", p.done}, {"skipped", skipped},
                      {"image", {p.size.channels, p.size.height, p.size.width}},
                      {"shards", json::parse(writer.closed_index())}};
  write_file_atomically((fs::path(output) / kStateFile).string(), state.dump() + "\n");
}

// Picks up an interrupted prepare of the same inputs; 0 when there is none.
int64_t load_state(const std::string& output, const std::string& print, Progress& p, MdsWriter& writer) {
  const fs::path path = fs::path(output) / kStateFile;
  if (!fs::exists(path)) return 0;
  std::ifstream in(path);
  const json state = json::parse(in, nullptr, false);
  if (!state.is_object() || state.value("fingerprint", "") != print)
    throw_error(ErrorKind::kUsage, output,
                "holds an unfinished prepare of other inputs or options (" + path.string() +
                    "); remove the directory or prepare into another --output");
  const json image = state.value("image", json::array());
  if (!image.is_array() || image.size() != 3 || !state["shards"].is_array())
    throw_error(ErrorKind::kFormat, path.string(), "is malformed; remove the directory and prepare again");
  writer.resume(state["shards"].dump());
  p.done = state.value("files_done", int64_t{0});
  p.size = {image[0].get<int64_t>(), image[1].get<int64_t>(), image[2].get<int64_t>()};
  for (const json& s : state.value("skipped", json::array())) p.skipped.emplace_back(s[0].get<int64_t>(), s[1]);
  return p.done;
}

}  // namespace

PreparedFolder prepare_image_folder(const ImageFolderOptions& o) {
  if (fs::exists(fs::path(o.output) / "index.json"))
    throw_error(ErrorKind::kUsage, o.output, "already holds a set (index.json); choose another --output or remove it");
  PreparedFolder result;
  const std::vector<InputFile> sorted = list_folder(o.root, result.classes);
  // Written in a drawn order, so that each shard mixes the classes.
  const std::vector<int64_t> order = epoch_order(static_cast<int64_t>(sorted.size()), o.seed, 0, true);
  std::vector<InputFile> files;
  files.reserve(sorted.size());
  for (const int64_t i : order) files.push_back(sorted[static_cast<size_t>(i)]);
  const std::string print = fingerprint(files, o);
  MdsWriter writer(o.output, {{"x", column_encoding(files), std::nullopt}, {"y", "int", std::nullopt}}, o.shard_bytes);
  Progress p;
  result.resumed_at = load_state(o.output, print, p, writer);
  int64_t last_added = p.done - 1;
  writer.on_shard_closed = [&](int64_t) {
    p.done = last_added + 1;
    save_state(o.output, print, p, writer);
  };
  SampleWorkers workers(o.threads);
  const auto total = static_cast<int64_t>(files.size());
  const int64_t chunk = 256 * static_cast<int64_t>(o.threads);
  std::vector<Checked> checked(static_cast<size_t>(chunk));
  for (int64_t begin = p.done; begin < total; begin += chunk) {
    const int64_t n = std::min(chunk, total - begin);
    workers.run(n, [&](int64_t k) { check_file(files[static_cast<size_t>(begin + k)], checked[static_cast<size_t>(k)]); });
    for (int64_t k = 0; k < n; ++k) {
      const Checked& c = checked[static_cast<size_t>(k)];
      const InputFile& f = files[static_cast<size_t>(begin + k)];
      if (!c.error.empty()) {
        if (o.on_corrupt == OnCorrupt::kFail)
          throw_error(ErrorKind::kFormat, "", c.error + " (--on-corrupt skip leaves such files out)");
        p.skipped.emplace_back(begin + k, c.error);
        continue;
      }
      if (p.size.channels == 0) p.size = c.size;
      if (c.size != p.size)
        throw_error(ErrorKind::kFormat, f.path,
                    "image is " + std::to_string(c.size.channels) + "x" + std::to_string(c.size.height) + "x" +
                        std::to_string(c.size.width) + " (C x H x W) but the set's are " +
                        std::to_string(p.size.channels) + "x" + std::to_string(p.size.height) + "x" +
                        std::to_string(p.size.width) + ": every image of a set has one size (resize them first)");
      char label[8] = {};
      for (int b = 0; b < 8; ++b) label[b] = static_cast<char>((static_cast<uint64_t>(f.label) >> (8 * b)) & 0xff);
      writer.add({c.bytes, std::string_view(label, sizeof label)});
      last_added = begin + k;
    }
    if (o.progress) o.progress(begin + n, total);
  }
  if (writer.samples() == 0) throw_error(ErrorKind::kFormat, o.root, "no image could be read: nothing to write");
  write_file_atomically((fs::path(o.output) / "classes.json").string(), json(result.classes).dump() + "\n");
  result.set.samples = writer.finish();
  fs::remove(fs::path(o.output) / kStateFile);
  for (const auto& entry : p.skipped) result.skipped.push_back(entry.second);
  const MdsReader check(o.output);  // what was written reads back
  result.set.shards = check.shards().size();
  for (const MdsShardInfo& s : check.shards()) result.set.bytes += s.bytes;
  return result;
}

}  // namespace gradmesh::data
