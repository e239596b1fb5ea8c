// observe/web: the dashboard's static files (HTML, CSS, JS in this folder), embedded into the
// binary at build time by embed.cmake: no runtime file access, no downloads.
#pragma once

#include <cstddef>
#include <string_view>

namespace ramjet::observe::web {

struct Asset {
  std::string_view name;          // file name in src/observe/web/ ("index.html", "app.js", ...)
  std::string_view content_type;  // from the extension
  std::string_view etag;          // quoted: "\"<16 hex digits of SHA-1>\""
  std::string_view bytes;
};

// nullptr when there is no such file.
const Asset* find_asset(std::string_view name);
size_t asset_count();

}  // namespace ramjet::observe::web
