#pragma once
// Cloud Hypervisor v52's live-migration protocol, as the double speaks it (vm.send-migration /
// vm.receive-migration). The wire is CH's (vm-migration/src/protocol.rs): every request is a
// 16-byte header {u16 command, 6 bytes padding, u64 payload length} (little endian) and its
// payload, every answer a 16-byte {u16 status (1 Ok, 2 Error), 6 padding, u64 length 0}.
// Commands: Start 1, Config 2 (VmMigrationConfig JSON), State 3 (the snapshot JSON),
// Memory 4 (a table of {u64 gpa, u64 length} then those bytes), Complete 5, Abandon 6,
// MemoryFd 7, CompletePaused 8.
//
// The sender follows CH's vmm/src/lib.rs send_migration (v52 lines 1395-1554): Start, Config,
// memory iterations while the guest runs (iteration 0: all of guest RAM; then what the guest
// dirtied) until precopy converges (nothing dirty, or the estimated downtime within
// downtime_ms, or timeout_s with timeout_strategy Ignore; with Cancel a timeout fails), pause,
// the final dirty memory, State, Complete (CompletePaused when the VM was paused).
// The receiver follows vm_receive_migration (v52 lines 2502-2556) and its state machine
// (vm_receive_migration_step, lines 880-1020).
//
// Unlike CH, whose control thread blocks inside the migration, the double runs both ends from
// its poll loop, so its pretend guest keeps running during precopy; its API stays blocked (the
// request is held) as CH's does. Guest "memory" is zeros: the double's guest state travels in
// the State payload.
#include <poll.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/unique_fd.hpp"
#include "tests/vmm_double/config_schema.hpp"

namespace chl::vmm_double {

// What a migration asks of the VMM (CH: the Vmm and its Vm). Error chains are CH's error
// Display chain below the API error ("Failed to send migratable component snapshot", …).
class MigrationVm {
 public:
  virtual ~MigrationVm() = default;
  virtual void migration_event(const std::string& event) = 0;
  virtual void migration_event(const std::string& event,
                               const std::map<std::string, std::string>& properties) = 0;
  // ---- sender ----
  virtual Json migration_config() = 0;      // VmMigrationConfig {vm_config, common_cpuid, …}
  virtual std::uint64_t guest_ram() = 0;    // bytes of guest RAM (iteration 0)
  virtual std::uint64_t dirty_bytes() = 0;  // the dirty log since the last call
  virtual bool pause_for_migration() = 0;   // vm.pause() when running; false: already paused
  virtual Json guest_snapshot() = 0;        // vm.snapshot() (snapshotting/snapshotted)
  // The migration ended: chain empty on success.
  virtual void send_finished(const std::vector<std::string>& chain) = 0;
  // ---- receiver ----
  // Each returns the error (empty: fine); an error answers Error and ends the receive aborted.
  virtual std::vector<std::string> receive_config(const Json& migration_config) = 0;
  virtual std::vector<std::string> receive_state(const Json& snapshot) = 0;
  virtual std::vector<std::string> receive_complete(bool resume) = 0;
  // The receive ended. `chain` empty: the API answers 204 (also after an abort: CH v52
  // returns Ok after migration-receive-failed); else the API error (a socket error).
  virtual void receive_finished(bool aborted, const std::vector<std::string>& chain) = 0;
};

struct SendParams {
  std::string destination_url;
  bool local = false;
  std::uint64_t downtime_ms = 300;
  std::uint64_t timeout_s = 3600;
  bool timeout_ignore = false;  // timeout_strategy "Ignore" (default "Cancel")
  std::uint32_t connections = 1;
  bool running = true;  // the VM's state when the migration began: Complete, else CompletePaused
};

// One end of a migration, driven from the VMM's poll loop.
class Migration {
 public:
  // vm.send-migration after validation: connects (the error chain on failure, with no event
  // emitted beyond what the caller did).
  static std::unique_ptr<Migration> send(MigrationVm& vm, const SendParams& params,
                                         std::vector<std::string>& chain);
  // vm.receive-migration: binds the listener ("Error binding to UNIX socket" on failure).
  static std::unique_ptr<Migration> receive(MigrationVm& vm, const std::string& receiver_url,
                                            std::vector<std::string>& chain);
  ~Migration();
  Migration(const Migration&) = delete;
  Migration& operator=(const Migration&) = delete;

  // The fd to poll and for what (fd -1: nothing now).
  [[nodiscard]] pollfd poll_entry() const;
  void ready(short revents);
  [[nodiscard]] bool finished() const { return finished_; }

 private:
  enum class Role { Send, Receive };
  enum class Step {
    // sender
    Start,
    Config,
    Memory,
    FinalMemory,
    State,
    Complete,
    Abandoning,
    // receiver
    Accepting,
    Header,
    Payload,
    MemoryData,
  };
  Migration(MigrationVm& vm, Role role);

  // Output: bytes, or runs of zero bytes (guest memory the double does not have).
  struct Segment {
    std::string bytes;
    std::uint64_t zeros = 0;
    bool memory = false;  // a write error here is CH's "Error transferring memory to socket"
  };
  void queue(std::string bytes) { out_.push_back({std::move(bytes), 0, false}); }
  void queue_zeros(std::uint64_t n) { out_.push_back({{}, n, true}); }
  // Write what the socket takes; false on error (chain set).
  bool flush();
  // Read what is there; the error chain at end of file or on an error (empty: fine).
  std::vector<std::string> fill();

  void send_request(std::uint16_t command, const std::string& payload);
  void send_memory(std::uint64_t bytes);  // one Memory request for a table of `bytes`
  void sender_next();                     // an Ok answer came: the next step
  void sender_memory_iteration();
  void sender_fail(std::vector<std::string> chain);
  void sender_answer();

  void receiver_accept();
  void receiver_input();
  void receiver_step(std::uint16_t command, const std::string& payload);
  void receiver_respond(bool ok);
  void receiver_end(std::vector<std::string> chain);

  MigrationVm& vm_;
  Role role_;
  Step step_;
  SendParams params_;
  common::UniqueFd listener_;
  common::UniqueFd sock_;
  std::deque<Segment> out_;
  std::string in_;
  bool finished_ = false;

  // sender
  std::uint64_t iteration_ = 0;
  std::uint64_t remaining_ = 0;  // the table precopy stopped at (sent with the final memory)
  bool was_running_ = true;
  double bytes_per_ms_ = 0;
  std::chrono::steady_clock::time_point begin_;
  std::chrono::steady_clock::time_point transfer_begin_;
  std::uint64_t transfer_bytes_ = 0;
  std::string abandon_error_;

  // receiver
  enum class RecvState { Established, Started, Configured, StateReceived, Completed, Aborted };
  RecvState recv_state_ = RecvState::Established;
  std::uint16_t command_ = 0;
  std::uint64_t length_ = 0;
  std::uint64_t memory_left_ = 0;
  std::string listen_path_;
};

}  // namespace chl::vmm_double
