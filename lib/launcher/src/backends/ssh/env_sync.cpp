// --sync-env's pure half (env_sync.hpp): the lock, a node's answer, the
// verdict on it, and the remote scripts.
#include "backends/ssh/env_sync.hpp"

#include <algorithm>
#include <array>
#include <filesystem>
#include <sstream>

#include <fmt/format.h>
#include <openssl/evp.h>
#include <nlohmann/json.hpp>

#include "sgpu/env/command.hpp"
#include "sgpu/env/error.hpp"

namespace sgpu::launcher::ssh {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::string sha256_hex(const std::string& text) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned size = 0;
  if (EVP_Digest(text.data(), text.size(), digest.data(), &size, EVP_sha256(), nullptr) != 1)
    throw Error("--sync-env: SHA-256 failed (OpenSSL)", 1);
  std::string out;
  for (unsigned i = 0; i < size; ++i) out += fmt::format("{:02x}", digest[i]);
  return out;
}

std::string str(const json& doc, const char* key) {
  auto it = doc.find(key);
  return it != doc.end() && it->is_string() ? it->get<std::string>() : std::string();
}

bool flag(const json& doc, const char* key) {
  auto it = doc.find(key);
  return it != doc.end() && it->is_boolean() && it->get<bool>();
}

std::map<std::string, std::string> name_versions(const json& doc, const char* key) {
  std::map<std::string, std::string> out;
  auto it = doc.find(key);
  if (it == doc.end() || !it->is_object()) return out;
  for (const auto& [name, version] : it->items())
    if (version.is_string()) out[name] = version.get<std::string>();
  return out;
}

bool hex_key(const std::string& key) {
  return key.size() == 16 &&
         std::all_of(key.begin(), key.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// A wheel's path under the cache: "<key>/<file>.whl", nothing that climbs out.
bool safe_wheel(const std::string& wheel, const std::string& key) {
  if (wheel.empty()) return true;
  auto slash = wheel.find('/');
  if (slash == std::string::npos || wheel.substr(0, slash) != key) return false;
  auto file = wheel.substr(slash + 1);
  return file.ends_with(".whl") && file.find('/') == std::string::npos && file.find("..") == std::string::npos &&
         std::none_of(file.begin(), file.end(), [](char c) { return c == ' ' || c == '\'' || c == '"' || c < 32; });
}

std::string list_some(const std::vector<std::string>& items, std::size_t most = 3) {
  std::string out;
  for (std::size_t i = 0; i < items.size() && i < most; ++i) out += (i ? "; " : "") + items[i];
  if (items.size() > most) out += fmt::format("; and {} more", items.size() - most);
  return out;
}

}  // namespace

std::string last_line(const std::string& text) {
  auto end = text.find_last_not_of("\r\n ");
  if (end == std::string::npos) return "";
  auto start = text.rfind('\n', end);
  start = start == std::string::npos ? 0 : start + 1;
  return text.substr(start, end + 1 - start);
}

EnvLock parse_env_lock(const std::string& text, const std::string& interpreter) {
  json doc = json::parse(text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object())
    throw Error(fmt::format("--sync-env: {} did not describe its environment (its output was not JSON: {})",
                            interpreter, text.substr(0, 200)),
                1);
  if (auto error = str(doc, "error"); !error.empty()) throw Error(fmt::format("--sync-env: {}", error), 1);
  EnvLock lock;
  lock.interpreter = interpreter;
  lock.version = str(doc, "version");
  lock.minor = str(doc, "minor");
  lock.implementation = str(doc, "implementation");
  lock.platform = str(doc, "platform");
  lock.system_site = flag(doc, "system_site");
  lock.system = name_versions(doc, "system");
  lock.uv = str(doc, "uv");
  if (lock.minor.empty() || lock.minor.find_first_not_of("0123456789.") != std::string::npos)
    throw Error(fmt::format("--sync-env: {} gave no Python version", interpreter), 1);
  if (auto it = doc.find("skipped"); it != doc.end() && it->is_array())
    for (const auto& s : *it)
      if (s.is_string()) lock.skipped.push_back(s.get<std::string>());
  if (auto it = doc.find("packages"); it != doc.end() && it->is_array())
    for (const auto& p : *it) {
      if (!p.is_object()) continue;
      EnvPackage pkg{str(p, "name"),  str(p, "version"),   str(p, "key"),
                     str(p, "wheel"), flag(p, "editable"), str(p, "source")};
      if (auto b = p.find("bytes"); b != p.end() && b->is_number_unsigned()) pkg.bytes = b->get<std::uint64_t>();
      if (pkg.name.empty() || !hex_key(pkg.key) || !safe_wheel(pkg.wheel, pkg.key))
        throw Error(fmt::format("--sync-env: {} described a package sgpu cannot use: {}", interpreter, p.dump()), 1);
      lock.packages.push_back(std::move(pkg));
    }
  std::sort(lock.packages.begin(), lock.packages.end(),
            [](const EnvPackage& a, const EnvPackage& b) { return a.name < b.name; });
  lock.hash = lock_hash(lock);
  return lock;
}

std::string lock_text(const EnvLock& lock) {
  std::string out = fmt::format("python {} {}\nplatform {}\nsystem-site-packages {}\n", lock.implementation, lock.minor,
                                lock.platform, lock.system_site ? "true" : "false");
  for (const auto& p : lock.packages) out += fmt::format("{} {} {}\n", p.name, p.version, p.key);
  return out;
}

std::string lock_hash(const EnvLock& lock) { return sha256_hex(lock_text(lock)).substr(0, 16); }

std::optional<NodeProbe> parse_node_probe(const std::string& text, std::string& why) {
  // The JSON is the last line: a login shell may print before it.
  auto line = last_line(text);
  if (line.empty()) {
    why = "it printed nothing";
    return std::nullopt;
  }
  json doc = json::parse(line, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) {
    why = fmt::format("its answer was not JSON: {}", line.substr(0, 200));
    return std::nullopt;
  }
  NodeProbe p;
  p.home = str(doc, "home");
  p.python = str(doc, "python");
  p.other_python = str(doc, "other");
  p.implementation = str(doc, "implementation");
  p.platform = str(doc, "platform");
  p.system = name_versions(doc, "system");
  for (auto [key, list] : {std::pair{"keys", &p.keys}, std::pair{"ready", &p.ready}, std::pair{"bins", &p.bins}}) {
    if (auto it = doc.find(key); it != doc.end() && it->is_array())
      for (const auto& k : *it)
        if (k.is_string()) list->push_back(k.get<std::string>());
    std::sort(list->begin(), list->end());
  }
  if (p.home.empty() || p.home.front() != '/') {
    why = "it gave no home directory";
    return std::nullopt;
  }
  return p;
}

std::string judge_node(const EnvLock& lock, const NodeProbe& probe, const std::string& node) {
  auto ours = fmt::format("this job's interpreter {} is Python {}", lock.interpreter, lock.version);
  if (probe.python.empty())
    return fmt::format("node {} has no python{} on its PATH ({}{}); install Python {} there", node, lock.minor, ours,
                       probe.other_python.empty() ? "" : fmt::format(", and {} has {}", node, probe.other_python),
                       lock.minor);
  if (!probe.implementation.empty() && probe.implementation != lock.implementation)
    return fmt::format("node {}'s {} is {}, not {} ({})", node, probe.python, probe.implementation, lock.implementation,
                       ours);
  if (probe.platform != lock.platform)
    return fmt::format("node {} is {} and this node is {}: wheels built here may not run there", node,
                       probe.platform.empty() ? "of an unknown platform" : probe.platform, lock.platform);
  if (!lock.system_site) return "";
  std::vector<std::string> missing, differ;
  for (const auto& [name, version] : lock.system) {
    auto it = probe.system.find(name);
    if (it == probe.system.end())
      missing.push_back(fmt::format("{} {}", name, version));
    else if (it->second != version)
      differ.push_back(fmt::format("{} {} where this node has {}", name, it->second, version));
  }
  if (missing.empty() && differ.empty()) return "";
  std::string what;
  if (!missing.empty())
    what = fmt::format("lacks {} of the {} system packages this environment sees: {}", missing.size(),
                       lock.system.size(), list_some(missing));
  if (!differ.empty()) what += fmt::format("{}has {}", what.empty() ? "" : ", and ", list_some(differ));
  return fmt::format(
      "node {}'s {} ({}) {} (the environment is made with --system-site-packages); install the same versions "
      "there, or make the environment without --system-site-packages",
      node, "python" + lock.minor, probe.python, what);
}

NodeShipment shipment_for(const EnvLock& lock, const NodeProbe& probe, std::uint64_t uv_bytes) {
  NodeShipment out;
  if (probe.env_ready) return out;
  for (const auto& p : lock.packages)
    if (!std::binary_search(probe.keys.begin(), probe.keys.end(), p.key)) {
      out.wheels.push_back(&p);
      out.bytes += p.bytes;
    }
  if (!lock.uv.empty() && !probe.has_uv) {
    out.uv = true;
    out.bytes += uv_bytes;
  }
  return out;
}

std::string uv_remote_name(const EnvLock& lock) {
  if (lock.uv.empty()) return "";
  std::error_code ec;
  auto size = fs::file_size(lock.uv, ec);
  auto mtime = fs::last_write_time(lock.uv, ec).time_since_epoch().count();
  return fmt::format("bin/uv-{}-{:x}", size, static_cast<unsigned long long>(mtime));
}

namespace {

constexpr const char* kProbePython = R"PY(
import json, os, platform, re, sys, sysconfig
c = sys.argv[1]
norm = lambda n: re.sub(r"[-_.]+", "-", n).lower()


def ls(d):
    try:
        return sorted(x for x in os.listdir(d) if not x.startswith("."))
    except OSError:
        return []


system = {}
for base in sys.path:  # named by their metadata directories, as the launcher names its own
    for info in ls(base or "."):
        if info.endswith((".dist-info", ".egg-info")):
            name, _, version = info.rsplit(".", 1)[0].partition("-")
            version = version.split("-py")[0] if info.endswith(".egg-info") else version
            if name and version and norm(name) not in system:
                system[norm(name)] = version
envs = os.path.join(c, "envs")
print(json.dumps({"home": os.environ.get("HOME", ""), "python": sys.executable,
                  "version": platform.python_version(), "implementation": sys.implementation.name,
                  "platform": sysconfig.get_platform(), "system": system, "keys": ls(os.path.join(c, "wheels")),
                  "ready": [h for h in ls(envs) if os.path.exists(os.path.join(envs, h, ".sgpu-ready"))],
                  "bins": ls(os.path.join(c, "bin"))}))
)PY";

}  // namespace

std::string env_probe_command(const std::string& minor) {
  return fmt::format(
      "c=\"$HOME/.cache/sgpu\"; py=$(command -v python{0} 2>/dev/null); "
      "if [ -z \"$py\" ]; then o=$(python3 --version 2>/dev/null | tr -d '\"\\\\'); "
      "printf '{{\"home\":\"%s\",\"python\":\"\",\"other\":\"%s\"}}\\n' \"$HOME\" \"${{o:+python3 $o}}\"; exit 0; fi; "
      "exec \"$py\" -s -c {1} \"$c\"",
      minor, env::shell_quote(kProbePython));
}

void settle_probe(const EnvLock& lock, NodeProbe& probe) {
  probe.env_ready = std::binary_search(probe.ready.begin(), probe.ready.end(), lock.hash);
  auto uv = uv_remote_name(lock);
  auto file = uv.substr(uv.find('/') + 1);
  probe.has_uv = !uv.empty() && std::binary_search(probe.bins.begin(), probe.bins.end(), file);
}

std::string env_build_command(const EnvLock& lock) {
  auto py = "python" + lock.minor;
  auto site = lock.system_site ? " --system-site-packages" : "";
  auto uv = uv_remote_name(lock);
  // What arrives is unpacked aside, then renamed into place (a rename is
  // atomic): a wheel directory already there is the same files (its key
  // says so) and stays, so builds of other environments reading it never
  // see it half written. The lock file then orders the builds of one hash.
  return fmt::format(
      "c=\"$HOME/.cache/sgpu\"; h={0}; e=\"$c/envs/$h\"; mkdir -p \"$c/envs\" \"$c/wheels\" \"$c/bin\" || exit 1; "
      "exec 7>\"$c/envs/.shipping\" && if command -v flock >/dev/null 2>&1; then flock -s 7; fi; "
      "t=$(mktemp -d \"$c/.in.XXXXXX\") || exit 1; trap 'rm -rf \"$t\"' EXIT; tar -xf - -C \"$t\" || exit 1; "
      "for d in \"$t\"/wheels/*; do [ -d \"$d\" ] && mv -T \"$d\" \"$c/wheels/${{d##*/}}\" 2>/dev/null; done; "
      "for f in \"$t\"/bin/*; do [ -f \"$f\" ] && mv -f \"$f\" \"$c/bin/\"; done; "
      "mv -f \"$t/envs/$h.txt\" \"$c/envs/$h.txt\" || exit 1; exec 7>&-; "
      "exec 9>\"$e.lock\" || exit 1; if command -v flock >/dev/null 2>&1; then flock 9 || exit 1; fi; "
      "if [ -e \"$e/.sgpu-ready\" ]; then echo 'sgpu-env: found'; exit 0; fi; rm -rf \"$e\"; "
      "py=$(command -v {1}) || {{ echo 'no {1} on the PATH' >&2; exit 1; }}; cd \"$c\" || exit 1; u={2}; "
      "if [ -n \"$u\" ] && [ -x \"$c/$u\" ]; then "
      "\"$c/$u\" venv -q --no-config --offline --python \"$py\"{3} \"$e\" && "
      "\"$c/$u\" pip install -q --no-config --offline --no-index --no-deps --python \"$e/bin/python\" "
      "$(cat \"envs/$h.txt\"); "
      "else \"$py\" -m venv{3} \"$e\" && \"$e/bin/python\" -m pip install -q --no-index --no-deps "
      "--disable-pip-version-check $(cat \"envs/$h.txt\"); fi || {{ s=$?; rm -rf \"$e\"; exit $s; }}; "
      "touch \"$e/.sgpu-ready\" && echo \"built $(date -u +%Y-%m-%dT%H:%M:%SZ)\" >> \"$e.log\" && "
      "echo 'sgpu-env: built'",
      env::shell_quote(lock.hash), py, env::shell_quote(uv), site);
}

std::string env_use_prelude(const EnvLock& lock) {
  return fmt::format(
      "u=\"$HOME/.cache/sgpu/envs/\"{}.used; touch \"$u\" 2>/dev/null && exec 8<\"$u\" && "
      "if command -v flock >/dev/null 2>&1; then flock -s -w 30 8; fi; ",
      env::shell_quote(lock.hash));
}

std::string env_maintenance_command(bool prune, long long unused_for_s) {
  return fmt::format(
      "c=\"$HOME/.cache/sgpu\"; e=\"$c/envs\"; now=$(date +%s); prune={0}; keep={1}; "
      "fl() {{ command -v flock >/dev/null 2>&1 && flock \"$@\"; }}; echo \"home $HOME\"; "
      "for d in \"$e\"/*/; do d=${{d%/}}; h=${{d##*/}}; [ -e \"$d/.sgpu-ready\" ] || continue; "
      "built=$(stat -c %Y \"$d/.sgpu-ready\"); used=$(stat -c %Y \"$e/$h.used\" 2>/dev/null || echo \"$built\"); "
      "kb=$(du -sk \"$d\" | cut -f1); n=$(wc -l < \"$e/$h.txt\" 2>/dev/null || echo 0); busy=0; "
      "if [ -e \"$e/$h.used\" ] && command -v flock >/dev/null 2>&1 && ! flock -n -x \"$e/$h.used\" true; then "
      "busy=1; fi; state=kept; "
      "if [ \"$prune\" = 1 ] && [ \"$busy\" = 0 ] && [ $((now - used)) -ge \"$keep\" ]; then "
      "if [ -e \"$e/$h.used\" ] && command -v flock >/dev/null 2>&1; then "
      "flock -n -x \"$e/$h.used\" rm -rf \"$d\" \"$e/$h.txt\" \"$e/$h.log\" && state=removed; "
      "else rm -rf \"$d\" \"$e/$h.txt\" \"$e/$h.log\" && state=removed; fi; "
      "[ \"$state\" = removed ] && rm -f \"$e/$h.used\" \"$e/$h.lock\"; fi; "
      "echo \"env $h $built $used $kb $n $busy $state\"; done; "
      "gone=0; gkb=0; if [ \"$prune\" = 1 ] && [ -d \"$c/wheels\" ]; then mkdir -p \"$e\"; "
      "exec 7>\"$e/.shipping\"; if command -v flock >/dev/null 2>&1; then flock -x 7; fi; "
      "refs=\" $(cat \"$e\"/*.txt 2>/dev/null | cut -d/ -f2 | tr '\\n' ' ') \"; "
      "for w in \"$c/wheels\"/*/; do w=${{w%/}}; [ -d \"$w\" ] || continue; case \"$refs\" in *\" ${{w##*/}} \"*) "
      "continue;; esac; "
      "k=$(du -sk \"$w\" | cut -f1); rm -rf \"$w\" && gone=$((gone + 1)) && gkb=$((gkb + k)); done; exec 7>&-; fi; "
      "wkb=$(du -sk \"$c/wheels\" 2>/dev/null | cut -f1); echo \"wheels ${{wkb:-0}} $gone $gkb\"",
      prune ? 1 : 0, unused_for_s);
}

std::optional<NodeEnvs> parse_env_listing(const std::string& text, std::string& why) {
  NodeEnvs out;
  bool wheels = false;
  std::size_t start = 0;
  while (start < text.size()) {
    auto nl = text.find('\n', start);
    if (nl == std::string::npos) nl = text.size();
    std::istringstream line(text.substr(start, nl - start));
    start = nl + 1;
    std::string kind;
    line >> kind;
    if (kind == "home") {
      line >> out.home;
    } else if (kind == "env") {
      CachedEnv env;
      int busy = 0;
      std::string state;
      if (line >> env.hash >> env.built >> env.used >> env.kib >> env.packages >> busy >> state) {
        env.in_use = busy != 0;
        env.removed = state == "removed";
        out.envs.push_back(env);
      }
    } else if (kind == "wheels") {
      wheels = static_cast<bool>(line >> out.wheels_kib >> out.wheels_removed >> out.wheels_removed_kib);
    }
  }
  if (!wheels) {
    why = "its answer had no wheels line";
    return std::nullopt;
  }
  return out;
}

std::string env_python(const EnvLock& lock, const std::string& home) {
  return fmt::format("{}/.cache/sgpu/envs/{}/bin/python", home, lock.hash);
}

std::string wheel_cache_dir(const env::Environment& environment) {
  if (auto it = environment.find("XDG_CACHE_HOME");
      it != environment.end() && !it->second.empty() && it->second.front() == '/')
    return it->second + "/sgpu/wheels";
  auto home = environment.find("HOME");
  return (home != environment.end() && !home->second.empty() ? home->second : std::string("/tmp")) +
         "/.cache/sgpu/wheels";
}

}  // namespace sgpu::launcher::ssh
