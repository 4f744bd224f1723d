#pragma once
// The peers the rendezvous refused before they proved the run's secret, kept
// for the user (pure, no I/O). Anyone who can reach the port can cause such a
// refusal, so none of them ends the rendezvous (one bad peer must not be able
// to kill a job) and one line per reason is printed, then only counted: a
// flood of connections does not flood node 0's terminal. What was refused,
// from where and how often goes into the error when the join times out, where
// a misconfigured node (a wrong secret, another sgpu version) is the likely
// reason for the wait.
#include <cstddef>
#include <string>
#include <vector>

namespace sgpu::rendezvous {

class RefusalLog {
 public:
  // Records that `peer` (an address) was refused for `reason`; true when it
  // is the first of that reason, the one to print.
  bool add(const std::string& peer, const std::string& reason);
  std::size_t total() const { return total_; }
  // "19 more rendezvous peers were refused: ..." for those added but not
  // printed since the last call; "" when there are none.
  std::string take_unsaid();
  // "5 peers were refused: 127.0.0.1 (5 times): it does not know the run's
  // secret"; "" when none was.
  std::string describe() const;

 private:
  struct Reason {
    std::string text;
    std::size_t count = 0;
    std::vector<std::string> peers;  // the first few distinct addresses
  };
  std::string list(bool with_peers) const;
  std::vector<Reason> reasons_;  // the first few distinct reasons, in order
  std::size_t other_ = 0;        // refusals past those
  std::size_t total_ = 0;
  std::size_t unsaid_ = 0;
};

}  // namespace sgpu::rendezvous
