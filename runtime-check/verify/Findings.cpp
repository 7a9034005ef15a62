// Reads torch-tidy --format=json output.
#include "Findings.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

namespace ttv {
namespace {

using json = nlohmann::json;

Location location(const json &j, bool requireLine) {
  Location l;
  if (!j.is_object())
    throw std::invalid_argument("finding/note must be an object");
  l.file = j.value("file", std::string());
  l.line = j.value("line", 0);
  l.column = j.value("column", 0);
  l.message = j.value("message", std::string());
  if (requireLine && (l.file.empty() || l.line <= 0))
    throw std::invalid_argument("finding needs \"file\" and a positive \"line\"");
  return l;
}

} // namespace

bool parseFindings(const std::string &text, std::vector<Finding> &out, std::string &err) {
  try {
    json doc = json::parse(text);
    const json *list = &doc;
    if (doc.is_object()) {
      auto it = doc.find("findings");
      if (it == doc.end() || !it->is_array())
        throw std::invalid_argument("expected an object with a \"findings\" array");
      list = &*it;
    } else if (!doc.is_array()) {
      throw std::invalid_argument("expected an object or an array of findings");
    }
    size_t index = 0;
    for (const auto &f : *list) {
      try {
        Finding fd;
        fd.check = f.at("check").get<std::string>();
        fd.level = f.value("level", std::string("warning"));
        fd.loc = location(f, true);
        if (auto n = f.find("notes"); n != f.end() && n->is_array())
          for (const auto &note : *n)
            fd.notes.push_back(location(note, false));
        out.push_back(std::move(fd));
      } catch (const std::exception &e) {
        throw std::invalid_argument("finding #" + std::to_string(index) + ": " + e.what());
      }
      ++index;
    }
  } catch (const std::exception &e) {
    err = e.what();
    return false;
  }
  return true;
}

bool readFindingsFile(const std::string &path, std::vector<Finding> &out, std::string &err) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    err = path + ": cannot open findings";
    return false;
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  if (!parseFindings(ss.str(), out, err)) {
    err = path + ": " + err;
    return false;
  }
  return true;
}

} // namespace ttv
