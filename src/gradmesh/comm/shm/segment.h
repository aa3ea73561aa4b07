// The shared-memory segment one shm group communicates through.
//
// Layout (offsets computed by SegmentLayout, every part 64-byte aligned):
//   SegmentHeader                      magic, sizes, attach counter, abort flag
//   RankRecord[size]                   pid (for liveness checks), failure text
//   SharedCounter progress[size]       each rank's collective progress
//   MailboxControl[size * (size - 1)]  send/recv counters and message headers, per ordered pair
//   mailbox data                       two chunks per ordered pair
//   region[2]                          the double-buffered data area of the collectives
//
// Lifetime: rank 0 creates the segment (shm_open with O_EXCL under a fresh
// name), reserves its memory up front (so a full /dev/shm is a clear error,
// not a SIGBUS later), publishes the name through the Store and waits until
// every rank has attached; then it unlinks the name. From then on the
// segment exists only as long as some rank maps it, so a crash at any later
// point cannot leak it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "gradmesh/comm/shm/sync.h"
#include "gradmesh/comm/store.h"

namespace gradmesh::comm::shm {

inline constexpr uint64_t kSegmentMagic = 0x31'6d'68'73'6d'64'72'67ULL;  // "grdmshm1"
inline constexpr uint32_t kSegmentVersion = 1;

struct SegmentHeader {
  std::atomic<uint64_t> magic;  // written last by the creator (release)
  uint32_t version;
  int32_t size;
  uint64_t total_bytes;
  uint64_t region_bytes;
  uint64_t mail_chunk_bytes;
  SharedCounter attached;        // ranks attached so far
  std::atomic<int32_t> aborted_by;  // 0 while healthy; 1 + the rank that failed first
};

// Written by its rank only.
struct alignas(64) RankRecord {
  std::atomic<int32_t> pid;  // 0 until the rank attached
  uint64_t start_time;       // see ProcessIdentity
  int32_t failure_kind;      // ErrorKind of the failure below
  char failure[236];         // why this rank aborted the group (NUL-terminated), read after aborted_by
};

// The header of one mailbox chunk: what the sender's send() was called with.
struct MessageHeader {
  int64_t tag;
  int64_t count;   // elements of the whole message
  int32_t dtype;   // DType
  int32_t chunk;   // index of this chunk within the message
};

// One direction of one pair: the sender advances `sent` after filling a
// chunk, the receiver advances `acked` after copying it out. Chunk k lives
// in data slot k % 2.
struct alignas(64) MailboxControl {
  SharedCounter sent;
  SharedCounter acked;
  MessageHeader headers[2];
};

struct SegmentLayout {
  int size = 0;
  size_t region_bytes = 0;      // one of the two collective buffers
  size_t mail_chunk_bytes = 0;  // one mailbox chunk
  size_t ranks_offset = 0, progress_offset = 0, controls_offset = 0, mail_offset = 0, regions_offset = 0;
  size_t total_bytes = 0;

  static SegmentLayout for_size(int size);
  // Index of the ordered pair (src -> dst) among the size * (size - 1) mailboxes.
  size_t pair(int src, int dst) const {
    return static_cast<size_t>(src) * (size - 1) + static_cast<size_t>(dst < src ? dst : dst - 1);
  }
};

// The name prefix of every segment whose group rendezvoused through a store
// with this endpoint: "/gradmesh-<16 hex digits of its hash>-". Lets a user
// (or a test) find what a job left in /dev/shm.
std::string segment_name_prefix(const std::string& store_endpoint);

class Segment {
 public:
  // Collective: every rank of the group calls it with the same `key`, `size`.
  // Rank 0 creates the segment and publishes its name under `key`; the others
  // attach; all return once every rank attached (or throw: Error(kTimeout)
  // naming the ranks that did not attach within `timeout`, Error(kComm) for a
  // segment that vanished or does not fit, Error(kIo) when the OS refuses).
  // `label` starts every message ("shm group of 4 ranks").
  static std::unique_ptr<Segment> join(Store& store, const std::string& key, int rank, int size, Millis timeout,
                                       const std::string& label);
  ~Segment();
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  // The POSIX name it had; already unlinked once join() returned.
  const std::string& name() const { return name_; }
  const SegmentLayout& layout() const { return layout_; }

  SegmentHeader& header() { return *reinterpret_cast<SegmentHeader*>(base_); }
  RankRecord& rank_record(int rank) { return at<RankRecord>(layout_.ranks_offset)[rank]; }
  SharedCounter& progress(int rank) { return at<SharedCounter>(layout_.progress_offset)[rank]; }
  MailboxControl& mailbox(int src, int dst) { return at<MailboxControl>(layout_.controls_offset)[layout_.pair(src, dst)]; }
  std::byte* mail_data(int src, int dst, int slot) {
    return base_ + layout_.mail_offset + (layout_.pair(src, dst) * 2 + slot) * layout_.mail_chunk_bytes;
  }
  std::byte* region(int buffer) { return base_ + layout_.regions_offset + buffer * layout_.region_bytes; }

 private:
  Segment(std::string name, SegmentLayout layout, std::byte* base) : name_(std::move(name)), layout_(layout), base_(base) {}
  template <typename T>
  T* at(size_t offset) { return reinterpret_cast<T*>(base_ + offset); }

  std::string name_;
  SegmentLayout layout_;
  std::byte* base_;
};

}  // namespace gradmesh::comm::shm
