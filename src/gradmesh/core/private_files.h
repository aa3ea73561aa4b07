// Owner-only files: what gradmesh writes can hold a job's data, weights and
// store contents, so on a shared machine no other user may read it.
//
// Directories gradmesh creates (run directories, checkpoints, file stores,
// log directories) get 0700 and files 0600, explicitly where it creates
// them; `gradmesh` itself also sets umask 077 first thing (cli/main.cc), so
// files written through streams (metrics.jsonl, report.html, traces) and its
// workers' files follow. Shared-memory segments are created 0600
// (comm/shm/segment.cc). tests/cli/file_modes_test.cc checks every file a
// run leaves.
#pragma once

#include <sys/types.h>

#include <string>
#include <system_error>

namespace gradmesh {

inline constexpr mode_t kPrivateFileMode = 0600;
inline constexpr mode_t kPrivateDirMode = 0700;

// Creates `dir` and any missing parents, each new one with kPrivateDirMode
// (existing ones keep theirs). Sets `ec` as std::filesystem does.
void create_private_directories(const std::string& dir, std::error_code& ec);

// umask 077: files and directories this process and its children create
// are the owner's only, whatever mode the code that creates them asks for.
void restrict_new_files_to_owner();

}  // namespace gradmesh
