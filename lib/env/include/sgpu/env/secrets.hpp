#pragma once
// Values that must not be shown: a dry run prints every rank's environment,
// and people paste that output into tickets and chats.
#include <string>
#include <string_view>

namespace sgpu::env {

// True for names that usually hold credentials: *TOKEN*, *SECRET*, *PASSWORD*,
// *PASSWD*, *KEY*, *CREDENTIAL*, *AUTH*, *PRIVATE*, *COOKIE*, *SESSION* (any case).
bool is_secret_name(std::string_view name);

// The value as it may be shown: "****" for a secret name; otherwise the value
// with any password in a URL ("https://user:pw@host") replaced by "****".
std::string mask_secret(std::string_view name, std::string_view value);

}  // namespace sgpu::env
