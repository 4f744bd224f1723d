#pragma once
// Values that must not be shown: a dry run prints every rank's environment
// and command line, the run directory keeps them (spec.json, state.json,
// summary.json), and people paste all of it into tickets and chats.
#include <string>
#include <string_view>
#include <vector>

namespace sgpu::env {

// True for names that usually hold credentials, in any case: those holding
// TOKEN, SECRET, PASSWORD, PASSWD, KEY, CREDENTIAL, CRED, AUTH, PRIVATE,
// COOKIE, SESSION, NETRC or WEBHOOK; those with a word (between '_', '-' or
// '.') PAT, PWD or DSN ("GITHUB_PAT", "MYSQL_PWD", "SENTRY_DSN"; not PATH,
// nor the shell's PWD and OLDPWD); those with a word ending in PASS
// ("SSHPASS", "--pass"; not "--passes").
bool is_secret_name(std::string_view name);

// The value as it may be shown: "****" for a secret name; otherwise the value
// with any password in a URL ("https://user:pw@host") replaced by "****".
std::string mask_secret(std::string_view name, std::string_view value);

// A command line as it may be shown: the value of a secret-named option
// masked ("--token x", "--api-key=x", "db.password=x"), and a URL's password.
std::vector<std::string> mask_arguments(const std::vector<std::string>& args);

}  // namespace sgpu::env
