// libFuzzer target: a tracking server's answers, as sgpu reads them. A server
// may answer anything (a proxy's HTML, truncated JSON, wrong types, bytes that
// are not UTF-8); nothing may crash, leak or read out of bounds, and what the
// parsers return must be usable as it is.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "tracking/mlflow_api.hpp"

using namespace sgpu::launcher::mlflow;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  // First byte: the HTTP status class the body comes with.
  static constexpr int kStatuses[] = {200, 201, 400, 401, 403, 404, 429, 500, 502, 503};
  int status = kStatuses[data[0] % (sizeof kStatuses / sizeof kStatuses[0])];
  std::string body(reinterpret_cast<const char*>(data + 1), size - 1);
  if (auto error = response_error({status, body})) {
    if (error->message.size() > 200 || error->code.size() > 200) __builtin_trap();
    if (error->message.find('\n') != std::string::npos) __builtin_trap();
  }
  if (auto id = parse_experiment_id(body))
    if (id->empty()) __builtin_trap();
  if (auto run = parse_run_info(body)) {
    if (run->run_id.empty() || run->experiment_id.empty()) __builtin_trap();
    auto server = parse_server_url("http://127.0.0.1:5000");
    (void)run_link(*server, run->experiment_id, run->run_id);
    (void)upload_artifact(*server, run->artifact_uri, "summary.json", "x");
  }
  if (auto url = parse_server_url(body)) {
    if (url->host.empty() || url->port == 0) __builtin_trap();
    (void)url->display();
  }
  return 0;
}
