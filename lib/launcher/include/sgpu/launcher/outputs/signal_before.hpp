#pragma once
// --signal-before as a run shows it: one line on the console, one event in
// events.jsonl and the summary's `signal_before`, when the signal went to
// every rank (or, the deadline being closer than that at the start, that it
// would not go).
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "sgpu/env/stop_signal.hpp"
#include "sgpu/launcher/process/events.hpp"

namespace sgpu::launcher {

struct SignalBeforeSent {
  env::SignalBefore signal;
  Clock::time_point deadline{};
  std::optional<Clock::time_point> sent_at;  // nullopt: not sent, the deadline was too close at the start
};

// "sgpu: SIGUSR2 to every rank: 8s before the run's deadline\n", or the warning that none goes.
std::string signal_before_line(const SignalBeforeSent& s);
// {"signal", "before_s", "deadline", "sent_at"} (the summary's), with "event" for events.jsonl.
nlohmann::ordered_json signal_before_json(const SignalBeforeSent& s);

// Keeps the record for the summary.
class SignalBeforeRecord : public JobObserver {
 public:
  void on_signal_before(const env::SignalBefore& signal, Clock::time_point deadline, bool sent) override {
    record_ = SignalBeforeSent{signal, deadline, sent ? std::optional(Clock::now()) : std::nullopt};
  }
  const std::optional<SignalBeforeSent>& record() const { return record_; }

 private:
  std::optional<SignalBeforeSent> record_;
};

}  // namespace sgpu::launcher
