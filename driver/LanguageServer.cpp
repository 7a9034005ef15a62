//===--- LanguageServer.cpp - torch-tidy driver ---------------------------===//
//
// JSON-RPC over stdio with LLVM's JSON library: Debian packages no
// maintained C++ LSP library (clangd's protocol layer is part of clangd, not
// a library), and the server needs only initialize/shutdown, the document
// notifications, publishDiagnostics and codeAction.
//
//===----------------------------------------------------------------------===//

#include "LanguageServer.h"
#include "Finding.h"
#include "OutputFormats.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"
#include <cstdio>
#include <iostream>

using namespace llvm;

namespace torchtidy {

unsigned utf16Column(StringRef Line, unsigned ByteColumn) {
  unsigned Units = 0;
  StringRef Before = Line.take_front(ByteColumn ? ByteColumn - 1 : 0);
  for (size_t I = 0; I < Before.size();) {
    unsigned char C = Before[I];
    unsigned Length = C < 0x80 ? 1 : C < 0xE0 ? 2 : C < 0xF0 ? 3 : 4;
    Units += Length == 4 ? 2 : 1; // a surrogate pair past the BMP
    I += Length;
  }
  return Units;
}

std::string uriFromPath(StringRef Path) {
  return "file://" + percentEncode(sys::path::convert_to_slash(Path));
}

std::string pathFromUri(StringRef Uri) {
  if (!Uri.consume_front("file://"))
    return "";
  return percentDecode(Uri);
}

namespace {

class Server {
public:
  Server(ArrayRef<const char *> Args, const char *Argv0) {
    static int Anchor;
    Self = sys::fs::getMainExecutable(Argv0, &Anchor);
    // The driver options go before the file, the compiler flags after it.
    bool AfterDashes = false;
    for (StringRef Arg : Args) {
      AfterDashes |= Arg == "--";
      (AfterDashes ? Flags : Options).push_back(Arg.str());
    }
  }

  int run() {
    sys::ChangeStdinToBinary();
    sys::ChangeStdoutToBinary();
    while (std::optional<json::Value> Message = read()) {
      const json::Object *O = Message->getAsObject();
      if (!O)
        continue;
      std::optional<StringRef> Method = O->getString("method");
      const json::Value *Id = O->get("id");
      const json::Object *Params = O->getObject("params");
      if (!Method)
        continue; // a response to a request of ours: none are sent
      if (*Method == "exit")
        return ShutDown ? 0 : 1;
      if (*Method == "initialize")
        reply(Id, initializeResult());
      else if (*Method == "shutdown") {
        ShutDown = true;
        reply(Id, nullptr);
      } else if (*Method == "textDocument/didOpen" ||
                 *Method == "textDocument/didSave")
        check(documentUri(Params));
      else if (*Method == "textDocument/didClose") {
        std::string Uri = documentUri(Params);
        Findings.erase(Uri);
        publish(Uri, {});
      } else if (*Method == "textDocument/codeAction")
        reply(Id, codeActions(Params));
      else if (Id) // an unknown request
        replyError(Id, -32601, ("method not found: " + *Method).str());
    }
    return ShutDown ? 0 : 1;
  }

private:
  std::optional<json::Value> read() {
    size_t Length = 0;
    std::string Line;
    while (std::getline(std::cin, Line)) {
      StringRef Header = StringRef(Line).rtrim("\r");
      if (Header.empty()) {
        if (!Length)
          continue;
        std::string Body(Length, '\0');
        if (!std::cin.read(Body.data(), Length))
          return std::nullopt;
        Expected<json::Value> V = json::parse(Body);
        if (!V) {
          consumeError(V.takeError());
          return json::Value(json::Object{});
        }
        return std::move(*V);
      }
      if (Header.consume_front_insensitive("Content-Length:"))
        Header.trim().getAsInteger(10, Length);
    }
    return std::nullopt;
  }

  void send(json::Object Message) {
    Message["jsonrpc"] = "2.0";
    std::string Body = formatv("{0}", json::Value(std::move(Message)));
    outs() << "Content-Length: " << Body.size() << "\r\n\r\n" << Body;
    outs().flush();
  }
  void reply(const json::Value *Id, json::Value Result) {
    send(json::Object{{"id", Id ? *Id : json::Value(nullptr)},
                      {"result", std::move(Result)}});
  }
  void replyError(const json::Value *Id, int Code, const std::string &What) {
    send(json::Object{
        {"id", *Id},
        {"error", json::Object{{"code", Code}, {"message", What}}}});
  }

  static json::Object initializeResult() {
    return json::Object{
        {"capabilities",
         json::Object{
             {"textDocumentSync",
              json::Object{{"openClose", true},
                           {"change", 0},
                           {"save", json::Object{{"includeText", false}}}}},
             {"codeActionProvider", true}}},
        {"serverInfo",
         json::Object{{"name", "torch-tidy"}, {"version", TORCH_TIDY_VERSION}}}};
  }

  static std::string documentUri(const json::Object *Params) {
    const json::Object *Document =
        Params ? Params->getObject("textDocument") : nullptr;
    std::optional<StringRef> Uri =
        Document ? Document->getString("uri") : std::nullopt;
    return Uri ? Uri->str() : "";
  }

  /// One `torch-tidy --format=json` run on the saved file.
  void check(const std::string &Uri) {
    std::string Path = pathFromUri(Uri);
    if (Path.empty())
      return;
    // The file changed since the last check: read it afresh.
    Sources = SourceCache();
    SmallString<128> Output;
    sys::fs::createTemporaryFile("torch-tidy-lsp", "json", Output);
    std::vector<StringRef> Argv = {Self, "--format=json", "--quiet"};
    for (const std::string &O : Options)
      Argv.push_back(O);
    Argv.push_back(Path);
    for (const std::string &F : Flags)
      Argv.push_back(F);
    std::optional<StringRef> Redirects[] = {StringRef(""), Output.str(),
                                            StringRef("")};
    sys::ExecuteAndWait(Self, Argv, std::nullopt, Redirects);
    std::vector<Finding> Found;
    if (auto Buffer = MemoryBuffer::getFile(Output))
      if (Expected<json::Value> Doc = json::parse((*Buffer)->getBuffer())) {
        if (Expected<Report> R = fromJSONDocument(*Doc, Output))
          Found = std::move(R->Findings);
        else
          consumeError(R.takeError());
      } else {
        consumeError(Doc.takeError());
      }
    sys::fs::remove(Output);
    // Only this file's findings (a header's come with the header).
    llvm::erase_if(Found, [&](const Finding &F) { return F.Loc.File != Path; });
    Findings[Uri] = Found;
    publish(Uri, Found);
  }

  json::Object position(const std::string &File, unsigned Line,
                        unsigned Column) {
    StringRef Text = Line ? Sources.lineText(File, Line) : "";
    return json::Object{{"line", Line ? Line - 1 : 0},
                        {"character", utf16Column(Text, Column)}};
  }
  json::Object range(const Location &L) {
    // The token at the location (to the end of its identifier).
    StringRef Text = L.Line ? Sources.lineText(L.File, L.Line) : "";
    unsigned End = std::max(1u, L.Column);
    while (End <= Text.size() &&
           (isAlnum(Text[End - 1]) || Text[End - 1] == '_'))
      ++End;
    if (End == std::max(1u, L.Column))
      ++End;
    return json::Object{{"start", position(L.File, L.Line, L.Column)},
                        {"end", position(L.File, L.Line, End)}};
  }

  void publish(const std::string &Uri, const std::vector<Finding> &Found) {
    json::Array Diagnostics;
    for (const Finding &F : Found) {
      json::Array Related;
      for (const Note &N : F.Notes)
        if (!N.Loc.File.empty())
          Related.push_back(json::Object{
              {"location", json::Object{{"uri", uriFromPath(N.Loc.File)},
                                        {"range", range(N.Loc)}}},
              {"message", N.Message}});
      Diagnostics.push_back(json::Object{
          {"range", range(F.Loc)},
          {"severity", F.Severity == Level::Error ? 1 : 2},
          {"source", "torch-tidy"},
          {"code", F.Check},
          {"message", F.Message},
          {"relatedInformation", std::move(Related)}});
    }
    send(json::Object{
        {"method", "textDocument/publishDiagnostics"},
        {"params", json::Object{{"uri", Uri},
                                {"diagnostics", std::move(Diagnostics)}}}});
  }

  /// The fix-its of the findings on the requested lines, each a quick fix:
  /// a warning's own fix-it is safe and preferred; an unsafe one (it
  /// changes what is trained, applied by --fix-unsafe) is offered too, not
  /// preferred, and its title says so.
  json::Array codeActions(const json::Object *Params) {
    json::Array Actions;
    std::string Uri = documentUri(Params);
    auto It = Findings.find(Uri);
    const json::Object *Range = Params ? Params->getObject("range") : nullptr;
    if (It == Findings.end() || !Range)
      return Actions;
    auto LineOf = [&](StringRef Key) -> int64_t {
      const json::Object *P = Range->getObject(Key);
      return P && P->getInteger("line") ? *P->getInteger("line") : -1;
    };
    int64_t First = LineOf("start"), Last = LineOf("end");
    for (const Finding &F : It->second) {
      int64_t Line = int64_t(F.Loc.Line) - 1;
      if (Line < First || Line > Last)
        continue;
      if (!F.Fixes.empty())
        Actions.push_back(action("Apply the fix-it of " + F.Check, F.Fixes,
                                 /*Preferred=*/true));
      if (!F.UnsafeFixes.empty())
        Actions.push_back(action("Apply the unsafe fix-it of " + F.Check +
                                     " (it changes what the code computes)",
                                 F.UnsafeFixes, /*Preferred=*/false));
    }
    return Actions;
  }

  json::Object action(std::string Title, ArrayRef<FixReplacement> Fix,
                      bool Preferred) {
    json::Object Changes;
    for (const FixReplacement &R : Fix) {
      Location End = R.Loc;
      End.Offset = R.Loc.Offset + R.Length;
      Sources.resolve(End);
      std::string FileUri = uriFromPath(R.Loc.File);
      if (!Changes.get(FileUri))
        Changes[FileUri] = json::Array{};
      Changes.getArray(FileUri)->push_back(json::Object{
          {"range",
           json::Object{
               {"start", position(R.Loc.File, R.Loc.Line, R.Loc.Column)},
               {"end", position(End.File, End.Line, End.Column)}}},
          {"newText", R.Replacement}});
    }
    return json::Object{{"title", std::move(Title)},
                        {"kind", "quickfix"},
                        {"isPreferred", Preferred},
                        {"edit", json::Object{{"changes", std::move(Changes)}}}};
  }

  std::string Self;
  std::vector<std::string> Options, Flags;
  std::map<std::string, std::vector<Finding>> Findings;
  SourceCache Sources;
  bool ShutDown = false;
};

} // namespace

int languageServerMain(ArrayRef<const char *> Args, const char *Argv0) {
  return Server(Args, Argv0).run();
}

} // namespace torchtidy
