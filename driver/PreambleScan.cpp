//===--- PreambleScan.cpp - torch-tidy driver -----------------------------===//

#include "PreambleScan.h"

#include "Finding.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include <map>

using namespace llvm;

namespace torchtidy {
namespace {

/// Reads the preprocessor directives that open a file, one per line, and
/// stops at anything else (code, a line continuation, an unterminated
/// comment). Comments and blank lines between directives are skipped.
class DirectiveScanner {
public:
  explicit DirectiveScanner(StringRef Text) : Text(Text) {
    this->Text.consume_front("\xEF\xBB\xBF"); // UTF-8 byte order mark
  }

  /// The next directive without its '#' and trailing `//` comment
  /// ("include <x>", "pragma once"), or std::nullopt.
  std::optional<StringRef> next() {
    while (true) {
      Text = Text.ltrim();
      if (Text.consume_front("//")) {
        // A backslash at the end continues the comment on the next line.
        StringRef Line;
        do {
          Line = Text.take_until([](char C) { return C == '\n'; });
          Text = Text.drop_front(Line.size()).drop_front(1);
        } while (Line.rtrim("\r").ends_with("\\") && !Text.empty());
        continue;
      }
      if (Text.starts_with("/*")) {
        size_t End = Text.find("*/", 2);
        if (End == StringRef::npos)
          return std::nullopt;
        Text = Text.drop_front(End + 2);
        continue;
      }
      if (!Text.starts_with("#"))
        return std::nullopt;
      StringRef Line =
          Text.drop_front().take_until([](char C) { return C == '\n'; });
      Line = Line.rtrim("\r").rtrim(" \t");
      if (Line.ends_with("\\"))
        return std::nullopt;
      Text = Text.drop_front(1 + Line.size());
      size_t Comment = Line.find("//");
      // `//` inside a quoted header name is part of the name.
      if (Comment != StringRef::npos &&
          Line.take_front(Comment).count('"') != 1)
        Line = Line.take_front(Comment).rtrim(" \t");
      // One block comment at the end (`#endif /* MODEL_H */`) goes; others
      // are left to clang.
      size_t Open = Line.find("/*");
      if (Open != StringRef::npos && Line.ends_with("*/") &&
          Line.find("*/", Open + 2) == Line.size() - 2 &&
          Line.take_front(Open).count('"') % 2 == 0)
        Line = Line.take_front(Open).rtrim(" \t");
      if (Line.contains("/*"))
        return std::nullopt;
      return Line.ltrim(" \t");
    }
  }

  /// After next() returned std::nullopt: the file ended (rather than code
  /// or something unreadable coming next).
  bool atEnd() const { return Text.empty(); }

private:
  StringRef Text;
};

/// `<x>` or `"x"` from an include directive, or "" for anything else (a
/// macro naming the header, #include_next, junk after the name).
StringRef includedName(StringRef Directive) {
  if (!Directive.consume_front("include") || Directive.empty() ||
      (Directive.front() != ' ' && Directive.front() != '\t' &&
       Directive.front() != '<' && Directive.front() != '"'))
    return "";
  Directive = Directive.ltrim(" \t");
  char Close = Directive.starts_with("<")    ? '>'
               : Directive.starts_with("\"") ? '"'
                                             : 0;
  size_t End = Close ? Directive.find(Close, 1) : StringRef::npos;
  if (End == StringRef::npos || End == 1 || End + 1 != Directive.size())
    return "";
  return Directive;
}

/// The word after \p Keyword in a directive (`ifndef X` -> `X`), or "".
StringRef directiveWord(StringRef Directive, StringRef Keyword) {
  if (!Directive.consume_front(Keyword) || Directive.empty() ||
      (Directive.front() != ' ' && Directive.front() != '\t'))
    return "";
  Directive = Directive.trim();
  StringRef Word = Directive.take_while(
      [](char C) { return isAlnum(C) || C == '_'; });
  return Word;
}

//===----------------------------------------------------------------------===//
// Flags
//===----------------------------------------------------------------------===//

enum class DirKind { Quote, Angled, System, KeyPath };

struct PathOption {
  StringRef Flag;
  DirKind Kind;
};

// Options whose value is a path, longest spelling first where one is a
// prefix of another. Values may be joined (`-Idir`, `--sysroot=dir`) or
// separate.
const PathOption PathOptions[] = {
    {"--include-directory", DirKind::Angled},
    {"-iquote", DirKind::Quote},
    {"-isystem", DirKind::System},
    {"-cxx-isystem", DirKind::System},
    {"-idirafter", DirKind::System},
    {"-isysroot", DirKind::KeyPath},
    {"-iframework", DirKind::KeyPath},
    {"--sysroot", DirKind::KeyPath},
    {"-resource-dir", DirKind::KeyPath},
    {"--gcc-toolchain", DirKind::KeyPath},
    {"--gcc-install-dir", DirKind::KeyPath},
    {"-I", DirKind::Angled},
    {"-F", DirKind::KeyPath},
    {"-B", DirKind::KeyPath},
};

/// Flags under which a PCH of the leading system headers would not mean
/// what the TU's own includes mean.
bool blocksSharedPreamble(StringRef Arg) {
  return Arg.starts_with("-include") || Arg == "--include" ||
         Arg.starts_with("--include=") || Arg.starts_with("-imacros") ||
         Arg.starts_with("--imacros") || Arg.starts_with("-fmodule") ||
         Arg.starts_with("-fcxx-modules") || Arg.starts_with("-x") ||
         Arg.starts_with("--language") || Arg.starts_with("-ivfsoverlay") ||
         Arg.starts_with("-working-directory") ||
         Arg.starts_with("--driver-mode=cl") || Arg.starts_with("/FI") ||
         Arg.starts_with("/Yu");
}

//===----------------------------------------------------------------------===//
// The system prefix
//===----------------------------------------------------------------------===//

struct Resolved {
  std::string Path; // "" for a header of the compiler's own search path
  bool System = false;
};

std::optional<std::string> findIn(ArrayRef<std::string> Dirs, StringRef Name) {
  for (const std::string &Dir : Dirs) {
    SmallString<256> Path(Dir);
    sys::path::append(Path, Name);
    if (sys::fs::is_regular_file(Path))
      return normalizePath(Path);
  }
  return std::nullopt;
}

/// Where clang finds \p Name, as far as the command line tells: a quoted
/// name next to the includer, then in the quote dirs; then the -I dirs
/// (project headers), then the system dirs; any other angled name is taken
/// for a header of the compiler's own system dirs (the standard library).
std::optional<Resolved> resolve(StringRef Spelled, StringRef IncluderDir,
                                const PreambleFlags &Flags) {
  bool Angled = Spelled.starts_with("<");
  StringRef Name = Spelled.drop_front().drop_back();
  if (!Angled) {
    SmallString<256> Next(IncluderDir);
    sys::path::append(Next, Name);
    if (sys::fs::is_regular_file(Next))
      return Resolved{normalizePath(Next), false};
    if (auto P = findIn(Flags.QuoteDirs, Name))
      return Resolved{*P, false};
  }
  if (auto P = findIn(Flags.AngledDirs, Name))
    return Resolved{*P, false};
  if (auto P = findIn(Flags.SystemDirs, Name))
    return Resolved{*P, true};
  if (!Angled)
    return std::nullopt;
  return Resolved{"", true};
}

class PrefixScanner {
public:
  explicit PrefixScanner(const PreambleFlags &Flags) : Flags(Flags) {}

  std::vector<std::string> scan(StringRef File) {
    Prefix.clear();
    Stopped = false;
    scanFile(File, /*IsMain=*/true, 0);
    Prefix.resize(Kept);
    return Prefix;
  }

private:
  void scanFile(StringRef File, bool IsMain, unsigned Depth) {
    auto Buffer = MemoryBuffer::getFile(File);
    if (!Buffer || Depth > 32) {
      Stopped = true;
      return;
    }
    DirectiveScanner Scanner((*Buffer)->getBuffer());
    StringRef Dir = sys::path::parent_path(File);
    StringRef Guard;
    bool First = true;
    while (!Stopped) {
      std::optional<StringRef> Directive = Scanner.next();
      if (!Directive) {
        // A header that ends without code returns to its includer.
        Stopped = IsMain || !Scanner.atEnd() || !Guard.empty();
        return;
      }
      if (First && !IsMain) {
        First = false;
        if (*Directive == "pragma once") {
          Entered.insert(File);
          continue;
        }
        StringRef Macro = directiveWord(*Directive, "ifndef");
        if (!Macro.empty()) {
          std::optional<StringRef> Define = Scanner.next();
          if (!Define || directiveWord(*Define, "define") != Macro) {
            Stopped = true;
            return;
          }
          Guard = Macro;
          Entered.insert(File);
          continue;
        }
      }
      First = false;
      if (!Guard.empty() && (*Directive == "endif" ||
                             !directiveWord(*Directive, "endif").empty() ||
                             Directive->starts_with("endif "))) {
        // The guard's #endif (any other #if stopped the scan): only the
        // end of the file may follow.
        Stopped = Scanner.next().has_value() || !Scanner.atEnd();
        return;
      }
      StringRef Name = includedName(*Directive);
      if (Name.empty()) {
        // A #define passes (PreambleGuard.h checks that the preamble's
        // headers never mention it); anything else ends the scan.
        Stopped = directiveWord(*Directive, "define").empty();
        continue;
      }
      std::optional<Resolved> Found = resolve(Name, Dir, Flags);
      if (!Found) {
        Stopped = true;
        return;
      }
      const Resolved &R = *Found;
      if (R.System) {
        std::string Angled = ("<" + Name.drop_front().drop_back() + ">").str();
        if (llvm::is_contained(Prefix, Angled))
          continue; // skipped by its guard (PCH builds check there is one)
        Prefix.push_back(std::move(Angled));
        if (!R.Path.empty())
          Kept = Prefix.size();
        continue;
      }
      if (!Entered.contains(R.Path)) // else skipped by its guard
        scanFile(R.Path, /*IsMain=*/false, Depth + 1);
    }
  }

  const PreambleFlags &Flags;
  std::vector<std::string> Prefix;
  size_t Kept = 0; // up to the last header of an explicit system dir
  StringSet<> Entered;
  bool Stopped = false;
};

} // namespace

std::optional<PreambleFlags> splitPreambleFlags(ArrayRef<std::string> Args,
                                                StringRef Directory,
                                                StringRef File) {
  PreambleFlags F;
  for (size_t I = 0; I < Args.size(); ++I) {
    StringRef Arg = Args[I];
    if (I > 0 && normalizePath(Arg, Directory) == File)
      continue; // the source file
    if (Arg == "-I-")
      return std::nullopt; // the old split of quote and angled dirs
    const PathOption *Option = nullptr;
    StringRef Value;
    for (const PathOption &O : PathOptions)
      if (Arg.starts_with(O.Flag)) {
        Option = &O;
        Value = Arg.drop_front(O.Flag.size());
        break;
      }
    if (!Option && blocksSharedPreamble(Arg))
      return std::nullopt;
    if (!Option) {
      // A relative path that names a file is made absolute: the preamble is
      // shared across compile directories.
      bool IsPath = I > 0 && !Arg.starts_with("-") && !Arg.empty() &&
                    !sys::path::is_absolute(Arg) &&
                    sys::fs::exists(normalizePath(Arg, Directory));
      F.KeyArgs.push_back(IsPath ? normalizePath(Arg, Directory) : Args[I]);
      continue;
    }
    bool Separate = Value.empty();
    if (!Separate && Value.front() == '=')
      Value = Value.drop_front();
    else if (!Separate && Option->Flag.starts_with("--"))
      return std::nullopt; // --sysrootX: not this option
    if (Separate) {
      if (I + 1 == Args.size())
        return std::nullopt;
      Value = Args[++I];
    }
    std::string Path = normalizePath(Value, Directory);
    switch (Option->Kind) {
    case DirKind::Quote:
      F.QuoteDirs.push_back(Path);
      F.ProjectDirs.push_back("-iquote" + Path);
      break;
    case DirKind::Angled:
      if (sys::fs::is_regular_file(Path))
        return std::nullopt; // a header map
      F.AngledDirs.push_back(Path);
      F.ProjectDirs.push_back("-I" + Path);
      break;
    case DirKind::System:
      F.SystemDirs.push_back(Path);
      [[fallthrough]];
    case DirKind::KeyPath:
      F.KeyArgs.push_back(Option->Flag.str());
      F.KeyArgs.push_back(Path);
      break;
    }
  }
  return F;
}

std::vector<std::string> systemPrefix(StringRef File,
                                      const PreambleFlags &Flags) {
  return PrefixScanner(Flags).scan(File);
}

std::vector<PrefixGroup>
planPrefixGroups(ArrayRef<PrefixCandidate> Candidates, unsigned MinMembers) {
  MinMembers = std::max(1u, MinMembers);
  std::map<std::string, std::vector<size_t>> ByFlags;
  for (size_t I = 0; I < Candidates.size(); ++I)
    if (!Candidates[I].FlagsKey.empty() && !Candidates[I].Includes.empty())
      ByFlags[Candidates[I].FlagsKey].push_back(I);

  std::vector<PrefixGroup> Groups;
  for (auto &[Key, Rest] : ByFlags) {
    while (Rest.size() >= MinMembers) {
      std::map<std::string, unsigned> Count;
      for (size_t I : Rest)
        ++Count[Candidates[I].Includes.front()];
      auto Best = Count.begin();
      for (auto It = Count.begin(); It != Count.end(); ++It)
        if (It->second > Best->second)
          Best = It;
      if (Best->second < MinMembers)
        break;
      PrefixGroup G;
      G.FlagsKey = Key;
      std::vector<size_t> Others;
      for (size_t I : Rest)
        (Candidates[I].Includes.front() == Best->first ? G.Members : Others)
            .push_back(I);
      G.Includes = Candidates[G.Members.front()].Includes;
      for (size_t I : G.Members) {
        const std::vector<std::string> &Own = Candidates[I].Includes;
        size_t Common = 0;
        while (Common < G.Includes.size() && Common < Own.size() &&
               G.Includes[Common] == Own[Common])
          ++Common;
        G.Includes.resize(Common);
      }
      Groups.push_back(std::move(G));
      Rest = std::move(Others);
    }
  }
  return Groups;
}

std::string prefixHeaderText(ArrayRef<std::string> Includes) {
  std::string Text = "// torch-tidy: the system headers that open several "
                     "translation units.\n";
  for (const std::string &Include : Includes)
    Text += "#include " + Include + "\n";
  return Text;
}

std::string describePrefix(ArrayRef<std::string> Includes) {
  return join(Includes, ", ");
}

} // namespace torchtidy
