// Helpers for a kernel plugin's `ablate_variant_info()` (docs/design.md). ablate puts this
// folder on every build's include path: `#include <ablate/variant_info.h>`.
#pragma once
#include <string>

#define ABLATE_STR(...) #__VA_ARGS__
#define ABLATE_XSTR(...) ABLATE_STR(__VA_ARGS__)  // a macro's expansion, as a string literal

// The variant info's "seams" object, {"seam": "the type it names", ...}: ablate writes it
// from the seams the base declares (#ifndef ABLATE_SEAM_X, ablate/build/seams.py) and
// force-includes it in every build. Built by hand, outside ablate, there is none.
#ifndef ABLATE_SEAMS_JSON
#define ABLATE_SEAMS_JSON "{}"
#endif

namespace ablate {

// The pathology names ablate passes as -DABLATE_PATHOLOGIES=a+b, as a JSON list: call it as
// ablate::names_json(ABLATE_XSTR(ABLATE_PATHOLOGIES)). ("+", not ",": nvcc splits -D values
// at commas.)
inline std::string names_json(const std::string& joined) {
  std::string out = "[", item;
  for (size_t i = 0; i <= joined.size(); ++i) {
    if (i == joined.size() || joined[i] == '+') {
      if (!item.empty()) out += (out.size() > 1 ? ", \"" : "\"") + item + "\"";
      item.clear();
    } else if (joined[i] != ' ') {
      item += joined[i];
    }
  }
  return out + "]";
}

}  // namespace ablate
