#include "gradmesh/comm/shm/segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>
#include <random>
#include <vector>

#include "gradmesh/core/error.h"
#include "gradmesh/core/text_format.h"

namespace gradmesh::comm::shm {
namespace {

// One all-reduce slot per rank plus the result slot make up a region. 1 MiB
// slots keep a double-buffered chunk of a 2-rank all-reduce (6 MiB) inside
// the last-level cache while still amortising each chunk's three handshakes.
constexpr size_t kSlotBytes = size_t{1} << 20;
// All mailboxes together stay near 8 MiB whatever the group size.
constexpr size_t kMailBudget = size_t{8} << 20;
constexpr size_t kPage = 4096;

size_t align_up(size_t value, size_t alignment) { return (value + alignment - 1) / alignment * alignment; }

std::string megabytes(size_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MB", static_cast<double>(bytes) / 1e6);
  return text;
}

// Unlinks the name unless released: covers every failure between shm_open
// and the moment all ranks attached.
class UnlinkGuard {
 public:
  explicit UnlinkGuard(std::string name) : name_(std::move(name)) {}
  ~UnlinkGuard() { unlink_now(); }
  void unlink_now() {
    if (!name_.empty()) ::shm_unlink(name_.c_str());
    name_.clear();
  }

 private:
  std::string name_;
};

std::byte* map_segment(int fd, size_t bytes, const std::string& where) {
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  ::close(fd);
  if (base == MAP_FAILED) throw_error(ErrorKind::kIo, where, std::string("mmap failed: ") + std::strerror(err));
  return static_cast<std::byte*>(base);
}

// Creates the segment under a fresh name, reserves and maps it.
std::byte* create_segment(const std::string& prefix, const SegmentLayout& layout, const std::string& label,
                          std::string* name) {
  std::random_device entropy;
  int fd = -1;
  for (int attempt = 0; fd < 0; ++attempt) {
    char suffix[64];
    std::snprintf(suffix, sizeof suffix, "%d-%08x", static_cast<int>(::getpid()), entropy());
    *name = prefix + suffix;
    fd = ::shm_open(name->c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 && (errno != EEXIST || attempt == 16))
      throw_error(ErrorKind::kIo, label, "cannot create shared-memory segment " + *name + ": " + std::strerror(errno));
  }
  int err = ::ftruncate(fd, static_cast<off_t>(layout.total_bytes)) == 0 ? 0 : errno;
  if (err == 0) err = ::posix_fallocate(fd, 0, static_cast<off_t>(layout.total_bytes));
  if (err != 0) {
    ::close(fd);
    ::shm_unlink(name->c_str());
    throw_error(ErrorKind::kIo, label,
                "cannot reserve " + megabytes(layout.total_bytes) + " of shared memory for " + *name + ": " +
                    std::strerror(err) + "; /dev/shm is full or too small (in a container, raise --shm-size)");
  }
  return map_segment(fd, layout.total_bytes, label + ": segment " + *name);
}

// Reads the name rank 0 published under `key` and maps that segment.
std::byte* attach_segment(Store& store, const std::string& key, const SegmentLayout& layout, Millis timeout,
                          const std::string& label, std::string* name) {
  try {
    *name = store.get(key, timeout);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kTimeout) throw;
    throw_error(ErrorKind::kTimeout, label,
                "rank 0 did not publish the shared-memory segment within " + seconds_text(timeout) + " (store " +
                    store.describe() + ", key '" + key + "'); is rank 0 running with the same store and world size?");
  }
  const int fd = ::shm_open(name->c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0)
    throw_error(ErrorKind::kComm, label,
                "cannot attach to segment " + *name + " (" + std::strerror(errno) +
                    "): rank 0 gave up waiting for the other ranks before this rank arrived");
  struct stat info {};
  if (::fstat(fd, &info) != 0 || static_cast<size_t>(info.st_size) != layout.total_bytes) {
    ::close(fd);
    throw_error(ErrorKind::kComm, label,
                "segment " + *name + " has " + std::to_string(info.st_size) + " bytes, expected " +
                    std::to_string(layout.total_bytes) + " for a group of " + std::to_string(layout.size) +
                    " ranks: the ranks disagree on the group size");
  }
  return map_segment(fd, layout.total_bytes, label + ": segment " + *name);
}

void initialise(std::byte* base, const SegmentLayout& layout) {
  // Fresh tmpfs pages are zero: these constructions only begin the objects' lifetimes.
  auto* header = new (base) SegmentHeader{};
  header->version = kSegmentVersion;
  header->size = layout.size;
  header->total_bytes = layout.total_bytes;
  header->region_bytes = layout.region_bytes;
  header->mail_chunk_bytes = layout.mail_chunk_bytes;
  for (int r = 0; r < layout.size; ++r) {
    new (base + layout.ranks_offset + r * sizeof(RankRecord)) RankRecord{};
    new (base + layout.progress_offset + r * sizeof(SharedCounter)) SharedCounter{};
  }
  const size_t pairs = static_cast<size_t>(layout.size) * (layout.size - 1);
  for (size_t p = 0; p < pairs; ++p) new (base + layout.controls_offset + p * sizeof(MailboxControl)) MailboxControl{};
}

// Construction waits: fail at once when rank 0 gave up, or an attached rank died.
class JoinHooks : public WaitHooks {
 public:
  JoinHooks(Segment& segment, std::string label) : segment_(segment), label_(std::move(label)) {}
  void after_sleep() override {
    if (segment_.header().aborted_by.load(std::memory_order_acquire) != 0)
      throw_error(ErrorKind::kComm, label_, "rank 0 gave up waiting for the other ranks to attach to " + segment_.name());
  }
  void periodic(std::span<const int>) override {
    for (int r = 0; r < segment_.layout().size; ++r) {
      RankRecord& record = segment_.rank_record(r);
      ProcessIdentity process{record.pid.load(std::memory_order_acquire), record.start_time};
      if (process.pid != 0 && !process_alive(process))
        throw_error(ErrorKind::kComm, label_,
                    "rank " + std::to_string(r) + " (pid " + std::to_string(process.pid) + ") exited while the group was forming");
    }
  }

 private:
  Segment& segment_;
  std::string label_;
};

}  // namespace

SegmentLayout SegmentLayout::for_size(int size) {
  SegmentLayout layout;
  layout.size = size;
  const size_t pairs = static_cast<size_t>(size) * (size - 1);
  // A group of one never touches the regions: reserve none.
  layout.region_bytes = size == 1 ? 0 : static_cast<size_t>(size + 1) * kSlotBytes;
  layout.mail_chunk_bytes =
      pairs == 0 ? 0 : std::clamp(kMailBudget / (2 * pairs) / kPage * kPage, kPage, size_t{256} << 10);
  layout.ranks_offset = align_up(sizeof(SegmentHeader), 64);
  layout.progress_offset = align_up(layout.ranks_offset + size * sizeof(RankRecord), 64);
  layout.controls_offset = align_up(layout.progress_offset + size * sizeof(SharedCounter), 64);
  layout.mail_offset = align_up(layout.controls_offset + pairs * sizeof(MailboxControl), kPage);
  layout.regions_offset = align_up(layout.mail_offset + pairs * 2 * layout.mail_chunk_bytes, kPage);
  layout.total_bytes = layout.regions_offset + 2 * layout.region_bytes;
  return layout;
}

std::string segment_name_prefix(const std::string& store_endpoint) {
  char text[48];
  std::snprintf(text, sizeof text, "/gradmesh-%016llx-",
                static_cast<unsigned long long>(XXH3_64bits(store_endpoint.data(), store_endpoint.size())));
  return text;
}

std::unique_ptr<Segment> Segment::join(Store& store, const std::string& key, int rank, int size, Millis timeout,
                                       const std::string& label) {
  const Clock::time_point deadline = deadline_after(timeout);
  const SegmentLayout layout = SegmentLayout::for_size(size);
  std::string name;
  std::byte* base = nullptr;
  std::unique_ptr<UnlinkGuard> unlink_guard;
  if (rank == 0) {
    base = create_segment(segment_name_prefix(store.describe()), layout, label, &name);
    unlink_guard = std::make_unique<UnlinkGuard>(name);
    initialise(base, layout);
  } else {
    base = attach_segment(store, key, layout, timeout, label, &name);
  }
  std::unique_ptr<Segment> segment(new Segment(name, layout, base));
  SegmentHeader& header = segment->header();
  RankRecord& mine = segment->rank_record(rank);
  if (rank != 0 && (header.magic.load(std::memory_order_acquire) != kSegmentMagic ||
                    header.version != kSegmentVersion || header.size != size))
    throw_error(ErrorKind::kComm, label, "segment " + name + " is not a gradmesh shm segment of " +
                                             std::to_string(size) + " ranks (version " + std::to_string(header.version) + ")");
  const ProcessIdentity self = this_process();
  int32_t expected_pid = 0;
  if (!mine.pid.compare_exchange_strong(expected_pid, self.pid))
    throw_error(ErrorKind::kUsage, label, "two processes joined as rank " + std::to_string(rank) +
                                              " (pids " + std::to_string(expected_pid) + " and " + std::to_string(self.pid) + ")");
  mine.start_time = self.start_time;
  if (rank == 0) {
    header.magic.store(kSegmentMagic, std::memory_order_release);
    store.set(key, name);
  }
  publish_add(header.attached, 1);

  // Rank 0 waits for `size` attachments, unlinks the name and counts once
  // more; the others wait for that last count, so on every rank the name is
  // gone by the time join() returns.
  SharedCounter* attached[] = {&header.attached};
  JoinHooks hooks(*segment, label);
  if (!wait_reached(attached, static_cast<uint32_t>(rank == 0 ? size : size + 1), deadline, hooks)) {
    std::vector<int> missing;
    for (int r = 0; r < size; ++r)
      if (segment->rank_record(r).pid.load(std::memory_order_acquire) == 0) missing.push_back(r);
    if (missing.empty()) missing.push_back(0);  // everyone attached; rank 0 did not finish
    if (rank == 0) header.aborted_by.store(1, std::memory_order_release);
    wake_all(header.attached);
    throw_error(ErrorKind::kTimeout, label,
                "timed out after " + seconds_text(timeout) + " waiting for " + rank_list(missing) +
                    " to attach to shared-memory segment " + name + " (store " + store.describe() +
                    "); start every rank with the same store and world size");
  }
  if (rank == 0) {
    unlink_guard->unlink_now();
    store.remove(key);
    publish_add(header.attached, 1);
  }
  return segment;
}

Segment::~Segment() { ::munmap(base_, layout_.total_bytes); }

}  // namespace gradmesh::comm::shm
