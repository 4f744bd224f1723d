#pragma once
// MLflow's REST API (/api/2.0/mlflow/...) as pure functions: the requests sgpu
// sends and what it reads from the answers. No I/O: the HTTP client
// (http_client.hpp) sends what these build, the Tracker strings them together.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sgpu/env/exit_code.hpp"

namespace sgpu::launcher::mlflow {

// An http(s) tracking server: "https://host:8443/prefix" -> https, host, 8443, "/prefix".
struct ServerUrl {
  bool tls = false;
  std::string host;  // without brackets for IPv6
  std::uint16_t port = 0;
  std::string base_path;  // "" or "/prefix", never a trailing slash
  // "http://host:port/prefix": how messages name the server (no user or password).
  std::string display() const;
};

// nullopt for anything but an http(s) URL with a host (a file path,
// "databricks", "sqlite:///x.db": stores sgpu does not talk to).
std::optional<ServerUrl> parse_server_url(std::string_view uri);

struct Request {
  std::string method;  // "GET", "POST", "PUT"
  std::string target;  // "/prefix/api/2.0/mlflow/runs/create"
  std::string body;
  std::string content_type;  // "" for GET
  std::string call;          // "runs/create": how messages name it
};

using KeyValues = std::vector<std::pair<std::string, std::string>>;

struct Metric {
  std::string key;
  double value = 0;
  std::int64_t timestamp_ms = 0;
  std::int64_t step = 0;
};

std::string url_encode(std::string_view text);

Request get_experiment_by_name(const ServerUrl& server, std::string_view name);
Request create_experiment(const ServerUrl& server, std::string_view name);
Request get_run(const ServerUrl& server, std::string_view run_id);
Request create_run(const ServerUrl& server, std::string_view experiment_id, std::string_view run_name,
                   std::int64_t start_ms, const KeyValues& tags);
// One or more log-batch calls: MLflow takes at most 100 params, 100 tags and
// 1000 metrics in one (params and tags are cut to the lengths it accepts).
std::vector<Request> log_batches(const ServerUrl& server, std::string_view run_id, const std::vector<Metric>& metrics,
                                 const KeyValues& params, const KeyValues& tags);
Request update_run(const ServerUrl& server, std::string_view run_id, std::string_view status, std::int64_t end_ms);
// A PUT of `relative_path` under the run's artifact root through the server's
// artifact proxy. nullopt when the run's artifacts do not go through the
// proxy (an s3:// or file: artifact root the server does not serve).
std::optional<Request> upload_artifact(const ServerUrl& server, std::string_view artifact_uri,
                                       std::string_view relative_path, std::string body);

// An answer, read without trusting it: any bytes, any status.
struct Response {
  int status = 0;
  std::string body;
};

// The error an answer carries: {"error_code": "...", "message": "..."} or its
// first line of text; "" when the status is a success.
struct ApiError {
  std::string code;     // "RESOURCE_DOES_NOT_EXIST", "" when the body has none
  std::string message;  // one line, at most 200 characters
};
std::optional<ApiError> response_error(const Response& response);

// experiments/get-by-name and experiments/create: the experiment id.
std::optional<std::string> parse_experiment_id(std::string_view body);

struct RunInfo {
  std::string run_id;
  std::string experiment_id;
  std::string artifact_uri;
};
// runs/create and runs/get: {"run": {"info": {...}}}.
std::optional<RunInfo> parse_run_info(std::string_view body);

// Statuses MLflow accepts for runs/update.
std::string_view run_status(env::JobEnd::Kind end);

// The run's page in the MLflow UI: "http://host:5000/#/experiments/1/runs/abc".
std::string run_link(const ServerUrl& server, std::string_view experiment_id, std::string_view run_id);

// "Basic dXNlcjpwdw==" or "Bearer t"; "" for none. The token wins, as in MLflow's client.
std::string authorization(std::string_view token, std::string_view username, std::string_view password);

// A server's message with `secret` (a token, a password) replaced by "****".
std::string scrub(std::string text, std::string_view secret);

}  // namespace sgpu::launcher::mlflow
