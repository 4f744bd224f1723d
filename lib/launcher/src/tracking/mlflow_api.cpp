#include "tracking/mlflow_api.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "sgpu/env/secrets.hpp"

namespace sgpu::launcher::mlflow {
namespace {

using json = nlohmann::json;

constexpr std::string_view kApi = "/api/2.0/mlflow/";
constexpr std::string_view kArtifactsApi = "/api/2.0/mlflow-artifacts/artifacts/";
constexpr std::size_t kMaxParams = 100;
constexpr std::size_t kMaxTags = 100;
constexpr std::size_t kMaxMetrics = 1000;
constexpr std::size_t kMaxKey = 250;
constexpr std::size_t kMaxParamValue = 6000;
constexpr std::size_t kMaxTagValue = 5000;
constexpr std::size_t kMaxMessage = 200;

bool iequals_prefix(std::string_view text, std::string_view prefix) {
  if (text.size() < prefix.size()) return false;
  for (std::size_t i = 0; i < prefix.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(text[i])) != prefix[i]) return false;
  return true;
}

Request post(const ServerUrl& server, std::string_view call, const json& body) {
  return {"POST", fmt::format("{}{}{}", server.base_path, kApi, call),
          body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json", std::string(call)};
}

// Cut at a UTF-8 character boundary, so the server gets valid text.
std::string cut(std::string_view text, std::size_t limit) {
  if (text.size() <= limit) return std::string(text);
  std::size_t end = limit;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  return std::string(text.substr(0, end));
}

json key_values(const KeyValues& items, std::size_t value_limit) {
  auto out = json::array();
  for (const auto& [k, v] : items) out.push_back({{"key", cut(k, kMaxKey)}, {"value", cut(v, value_limit)}});
  return out;
}

std::string one_line(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '\n' || c == '\r') {
      if (!out.empty()) break;
      continue;
    }
    out += std::isprint(static_cast<unsigned char>(c)) != 0 || (static_cast<unsigned char>(c) & 0x80) != 0 ? c : ' ';
  }
  return cut(out, kMaxMessage);
}

const json* member(const json& doc, std::string_view name) {
  if (!doc.is_object()) return nullptr;
  auto it = doc.find(name);
  return it == doc.end() ? nullptr : &*it;
}

std::optional<std::string> string_member(const json& doc, std::string_view name) {
  const auto* m = member(doc, name);
  if (m == nullptr || !m->is_string()) return std::nullopt;
  return m->get<std::string>();
}

std::string base64(std::string_view in) {
  static constexpr char kTable[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  std::size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    unsigned n = (static_cast<unsigned char>(in[i]) << 16) | (static_cast<unsigned char>(in[i + 1]) << 8) |
                 static_cast<unsigned char>(in[i + 2]);
    out += {kTable[(n >> 18) & 63], kTable[(n >> 12) & 63], kTable[(n >> 6) & 63], kTable[n & 63]};
  }
  if (i + 1 == in.size()) {
    unsigned n = static_cast<unsigned char>(in[i]) << 16;
    out += {kTable[(n >> 18) & 63], kTable[(n >> 12) & 63], '=', '='};
  } else if (i + 2 == in.size()) {
    unsigned n = (static_cast<unsigned char>(in[i]) << 16) | (static_cast<unsigned char>(in[i + 1]) << 8);
    out += {kTable[(n >> 18) & 63], kTable[(n >> 12) & 63], kTable[(n >> 6) & 63], '='};
  }
  return out;
}

// "/a b/c" -> "/a%20b/c": each path segment encoded, the slashes kept.
std::string encode_path(std::string_view path) {
  std::string out;
  std::size_t start = 0;
  while (start <= path.size()) {
    auto slash = std::min(path.find('/', start), path.size());
    out += url_encode(path.substr(start, slash - start));
    if (slash < path.size()) out += '/';
    start = slash + 1;
  }
  return out;
}

}  // namespace

std::string ServerUrl::display() const {
  bool v6 = host.find(':') != std::string::npos;
  bool default_port = port == (tls ? 443 : 80);
  return fmt::format("{}://{}{}{}{}{}", tls ? "https" : "http", v6 ? "[" : "", host, v6 ? "]" : "",
                     default_port ? "" : fmt::format(":{}", port), base_path);
}

std::optional<ServerUrl> parse_server_url(std::string_view uri) {
  ServerUrl url;
  if (iequals_prefix(uri, "https://")) {
    url.tls = true;
    uri.remove_prefix(8);
  } else if (iequals_prefix(uri, "http://")) {
    uri.remove_prefix(7);
  } else {
    return std::nullopt;
  }
  auto path_start = std::min(uri.find_first_of("/?#"), uri.size());
  auto authority = uri.substr(0, path_start);
  auto path = uri.substr(path_start);
  path = path.substr(0, std::min(path.find_first_of("?#"), path.size()));
  if (auto at = authority.rfind('@'); at != std::string_view::npos) authority.remove_prefix(at + 1);
  std::string_view port_text;
  if (authority.starts_with('[')) {
    auto close = authority.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    url.host = authority.substr(1, close - 1);
    auto rest = authority.substr(close + 1);
    if (!rest.empty()) {
      if (rest[0] != ':') return std::nullopt;
      port_text = rest.substr(1);
    }
  } else {
    auto colon = authority.find(':');
    url.host = authority.substr(0, colon);
    if (colon != std::string_view::npos) port_text = authority.substr(colon + 1);
  }
  if (url.host.empty()) return std::nullopt;
  url.port = url.tls ? 443 : 80;
  if (!port_text.empty()) {
    unsigned port = 0;
    auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
    if (ec != std::errc() || end != port_text.data() + port_text.size() || port == 0 || port > 65535)
      return std::nullopt;
    url.port = static_cast<std::uint16_t>(port);
  }
  while (path.ends_with('/')) path.remove_suffix(1);
  url.base_path = path;
  return url;
}

std::string url_encode(std::string_view text) {
  std::string out;
  for (char c : text) {
    auto u = static_cast<unsigned char>(c);
    if (std::isalnum(u) != 0 || c == '-' || c == '_' || c == '.' || c == '~')
      out += c;
    else
      out += fmt::format("%{:02X}", u);
  }
  return out;
}

Request get_experiment_by_name(const ServerUrl& server, std::string_view name) {
  return {"GET",
          fmt::format("{}{}experiments/get-by-name?experiment_name={}", server.base_path, kApi, url_encode(name)), "",
          "", "experiments/get-by-name"};
}

Request create_experiment(const ServerUrl& server, std::string_view name) {
  return post(server, "experiments/create", {{"name", name}});
}

Request get_run(const ServerUrl& server, std::string_view run_id) {
  return {"GET", fmt::format("{}{}runs/get?run_id={}", server.base_path, kApi, url_encode(run_id)), "", "", "runs/get"};
}

Request create_run(const ServerUrl& server, std::string_view experiment_id, std::string_view run_name,
                   std::int64_t start_ms, const KeyValues& tags) {
  json body = {{"experiment_id", experiment_id}, {"start_time", start_ms}, {"tags", key_values(tags, kMaxTagValue)}};
  if (!run_name.empty()) body["run_name"] = run_name;
  return post(server, "runs/create", body);
}

std::vector<Request> log_batches(const ServerUrl& server, std::string_view run_id, const std::vector<Metric>& metrics,
                                 const KeyValues& params, const KeyValues& tags) {
  std::vector<Request> out;
  std::size_t m = 0;
  std::size_t p = 0;
  std::size_t t = 0;
  while (m < metrics.size() || p < params.size() || t < tags.size() || out.empty()) {
    json body = {{"run_id", run_id}};
    auto ms = json::array();
    for (std::size_t n = 0; n < kMaxMetrics && m < metrics.size(); ++n, ++m)
      ms.push_back({{"key", cut(metrics[m].key, kMaxKey)},
                    {"value", metrics[m].value},
                    {"timestamp", metrics[m].timestamp_ms},
                    {"step", metrics[m].step}});
    KeyValues ps(params.begin() + static_cast<std::ptrdiff_t>(p),
                 params.begin() + static_cast<std::ptrdiff_t>(std::min(params.size(), p + kMaxParams)));
    p += ps.size();
    KeyValues ts(tags.begin() + static_cast<std::ptrdiff_t>(t),
                 tags.begin() + static_cast<std::ptrdiff_t>(std::min(tags.size(), t + kMaxTags)));
    t += ts.size();
    body["metrics"] = std::move(ms);
    body["params"] = key_values(ps, kMaxParamValue);
    body["tags"] = key_values(ts, kMaxTagValue);
    out.push_back(post(server, "runs/log-batch", body));
  }
  return out;
}

Request update_run(const ServerUrl& server, std::string_view run_id, std::string_view status, std::int64_t end_ms) {
  return post(server, "runs/update", {{"run_id", run_id}, {"status", status}, {"end_time", end_ms}});
}

std::optional<Request> upload_artifact(const ServerUrl& server, std::string_view artifact_uri,
                                       std::string_view relative_path, std::string body) {
  constexpr std::string_view kScheme = "mlflow-artifacts:";
  if (!artifact_uri.starts_with(kScheme)) return std::nullopt;
  auto root = artifact_uri.substr(kScheme.size());
  if (root.starts_with("//")) {  // mlflow-artifacts://host:port/path: the path is what counts
    root.remove_prefix(2);
    root = root.substr(std::min(root.find('/'), root.size()));
  }
  while (root.starts_with('/')) root.remove_prefix(1);
  while (root.ends_with('/')) root.remove_suffix(1);
  while (relative_path.starts_with('/')) relative_path.remove_prefix(1);
  std::string path = root.empty() ? std::string(relative_path) : fmt::format("{}/{}", root, relative_path);
  return Request{"PUT", fmt::format("{}{}{}", server.base_path, kArtifactsApi, encode_path(path)), std::move(body),
                 "application/octet-stream", "mlflow-artifacts PUT " + std::string(relative_path)};
}

std::optional<ApiError> response_error(const Response& response) {
  if (response.status >= 200 && response.status < 300) return std::nullopt;
  ApiError error;
  auto doc = json::parse(response.body, nullptr, false);
  if (!doc.is_discarded() && doc.is_object()) {
    error.code = one_line(string_member(doc, "error_code").value_or(""));
    error.message = one_line(string_member(doc, "message").value_or(""));
  } else {
    error.message = one_line(response.body);
  }
  return error;
}

std::optional<std::string> parse_experiment_id(std::string_view body) {
  auto doc = json::parse(body, nullptr, false);
  if (doc.is_discarded()) return std::nullopt;
  if (auto id = string_member(doc, "experiment_id"); id && !id->empty()) return id;
  if (const auto* experiment = member(doc, "experiment"))
    if (auto id = string_member(*experiment, "experiment_id"); id && !id->empty()) return id;
  return std::nullopt;
}

std::optional<RunInfo> parse_run_info(std::string_view body) {
  auto doc = json::parse(body, nullptr, false);
  if (doc.is_discarded()) return std::nullopt;
  const auto* run = member(doc, "run");
  const auto* info = run == nullptr ? nullptr : member(*run, "info");
  if (info == nullptr) return std::nullopt;
  RunInfo out;
  out.run_id = string_member(*info, "run_id").value_or("");
  if (out.run_id.empty()) out.run_id = string_member(*info, "run_uuid").value_or("");
  out.experiment_id = string_member(*info, "experiment_id").value_or("");
  out.artifact_uri = string_member(*info, "artifact_uri").value_or("");
  if (out.run_id.empty() || out.experiment_id.empty()) return std::nullopt;
  return out;
}

std::string_view run_status(env::JobEnd::Kind end) {
  switch (env::end_class(end)) {
    case env::EndClass::Succeeded:
      return "FINISHED";
    case env::EndClass::TimedOut:
    case env::EndClass::StoppedFromOutside:
      return "KILLED";
    case env::EndClass::Hung:
    case env::EndClass::Failed:
      break;
  }
  return "FAILED";
}

std::string run_link(const ServerUrl& server, std::string_view experiment_id, std::string_view run_id) {
  return fmt::format("{}/#/experiments/{}/runs/{}", server.display(), experiment_id, run_id);
}

std::string authorization(std::string_view token, std::string_view username, std::string_view password) {
  if (!token.empty()) return fmt::format("Bearer {}", token);
  if (!username.empty() || !password.empty()) return "Basic " + base64(fmt::format("{}:{}", username, password));
  return "";
}

std::string scrub(std::string text, std::string_view secret) {
  if (secret.empty()) return text;
  for (auto at = text.find(secret); at != std::string::npos; at = text.find(secret, at + 4))
    text.replace(at, secret.size(), "****");
  return text;
}

}  // namespace sgpu::launcher::mlflow
