//===--- HtmlMarkdown.cpp - torch-tidy driver -----------------------------===//
//
// The markdown of docs/checks/*.md as HTML, for the pages bundled into the
// report: headings, paragraphs, lists (flat, with indented continuation
// lines), tables, block quotes, fenced code; inline code, **bold** and links.
// That is all the pages use; anything else shows as text. Every character
// of the page is escaped; a link keeps its target only when it is http(s)
// or another check's page.
//
//===----------------------------------------------------------------------===//

#include "HtmlParts.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"

using namespace llvm;

namespace torchtidy::html {
namespace {

using LinkResolver = std::function<std::string(StringRef)>;

void printInline(StringRef Text, const LinkResolver &LinkFor,
                 raw_ostream &OS) {
  size_t I = 0;
  while (I < Text.size()) {
    char C = Text[I];
    if (C == '`') {
      size_t Ticks = Text.drop_front(I).find_first_not_of('`');
      size_t Close = Ticks == StringRef::npos
                         ? Ticks
                         : Text.find(std::string(Ticks, '`'), I + Ticks);
      if (Close != StringRef::npos) {
        OS << "<code>" << escaped(Text.slice(I + Ticks, Close).trim(' '))
           << "</code>";
        I = Close + Ticks;
        continue;
      }
    } else if (Text.substr(I).starts_with("**")) {
      size_t Close = Text.find("**", I + 2);
      if (Close != StringRef::npos && Close > I + 2) {
        OS << "<strong>";
        printInline(Text.slice(I + 2, Close), LinkFor, OS);
        OS << "</strong>";
        I = Close + 2;
        continue;
      }
    } else if (C == '[') {
      size_t Mid = Text.find("](", I);
      size_t Close = Mid == StringRef::npos ? Mid : Text.find(')', Mid);
      if (Close != StringRef::npos) {
        std::string Href = LinkFor(Text.slice(Mid + 2, Close));
        if (!Href.empty())
          OS << "<a href=\"" << escaped(Href) << "\">";
        printInline(Text.slice(I + 1, Mid), LinkFor, OS);
        if (!Href.empty())
          OS << "</a>";
        I = Close + 1;
        continue;
      }
    }
    OS << escaped(Text.substr(I, 1));
    ++I;
  }
}

bool isListItem(StringRef Line, bool &Ordered, StringRef &Rest) {
  StringRef T = Line.ltrim(' ');
  if (T.consume_front("- ") || T.consume_front("* ")) {
    Ordered = false;
    Rest = T;
    return true;
  }
  size_t Digits = T.find_first_not_of("0123456789");
  if (Digits > 0 && Digits != StringRef::npos &&
      T.drop_front(Digits).starts_with(". ")) {
    Ordered = true;
    Rest = T.drop_front(Digits + 2);
    return true;
  }
  return false;
}

void printTableRow(StringRef Line, StringRef Cell, const LinkResolver &LinkFor,
                   raw_ostream &OS) {
  Line = Line.trim();
  Line.consume_front("|");
  Line.consume_back("|");
  SmallVector<StringRef, 8> Cells;
  Line.split(Cells, '|');
  OS << "<tr>";
  for (StringRef C : Cells) {
    OS << '<' << Cell << '>';
    printInline(C.trim(), LinkFor, OS);
    OS << "</" << Cell << '>';
  }
  OS << "</tr>\n";
}

bool isTableSeparator(StringRef Line) {
  Line = Line.trim();
  return Line.starts_with("|") &&
         Line.find_first_not_of("|-: ") == StringRef::npos;
}

} // namespace

void printMarkdown(StringRef Markdown, const LinkResolver &LinkFor,
                   raw_ostream &OS) {
  SmallVector<StringRef, 0> Lines;
  Markdown.split(Lines, '\n');
  size_t I = 0;
  auto Blank = [&](size_t K) { return Lines[K].trim().empty(); };
  while (I < Lines.size()) {
    StringRef Line = Lines[I].rtrim('\r');
    if (Line.trim().empty()) {
      ++I;
      continue;
    }
    if (Line.starts_with("```")) {
      OS << "<pre><code>";
      for (++I; I < Lines.size() && !Lines[I].starts_with("```"); ++I)
        OS << escaped(Lines[I].rtrim('\r')) << '\n';
      OS << "</code></pre>\n";
      ++I;
      continue;
    }
    if (Line.starts_with("#")) {
      size_t Level = std::min<size_t>(Line.find_first_not_of('#'), 4);
      OS << "<h" << Level + 2 << '>';
      printInline(Line.drop_front(Line.find_first_not_of('#')).trim(), LinkFor,
                  OS);
      OS << "</h" << Level + 2 << ">\n";
      ++I;
      continue;
    }
    if (Line.starts_with("|") && I + 1 < Lines.size() &&
        isTableSeparator(Lines[I + 1])) {
      OS << "<table class=\"md\"><thead>";
      printTableRow(Line, "th", LinkFor, OS);
      OS << "</thead><tbody>\n";
      for (I += 2; I < Lines.size() && Lines[I].trim().starts_with("|"); ++I)
        printTableRow(Lines[I], "td", LinkFor, OS);
      OS << "</tbody></table>\n";
      continue;
    }
    bool Ordered;
    StringRef Item;
    if (isListItem(Line, Ordered, Item)) {
      const char *Tag = Ordered ? "ol" : "ul";
      OS << '<' << Tag << ">\n";
      bool ThisOrdered;
      while (I < Lines.size() && isListItem(Lines[I], ThisOrdered, Item) &&
             ThisOrdered == Ordered) {
        // The item and its continuation lines (indented, not items).
        std::string Text = Item.rtrim('\r').str();
        StringRef Next;
        bool NextOrdered;
        for (++I; I < Lines.size() && !Blank(I) &&
                  Lines[I].starts_with(" ") &&
                  !isListItem(Lines[I], NextOrdered, Next);
             ++I)
          Text += " " + Lines[I].trim().str();
        OS << "<li>";
        printInline(Text, LinkFor, OS);
        OS << "</li>\n";
        while (I < Lines.size() && Blank(I) && I + 1 < Lines.size() &&
               isListItem(Lines[I + 1], NextOrdered, Next))
          ++I; // a loose list: blank lines between its items
      }
      OS << "</" << Tag << ">\n";
      continue;
    }
    // A paragraph (or a block quote): up to a blank line or another block.
    bool Quote = Line.starts_with(">");
    std::string Text;
    StringRef Ignored;
    bool IgnoredOrdered;
    for (; I < Lines.size() && !Blank(I); ++I) {
      StringRef L = Lines[I].rtrim('\r');
      if (!Text.empty() &&
          (L.starts_with("```") || L.starts_with("#") || L.starts_with("|") ||
           isListItem(L, IgnoredOrdered, Ignored) ||
           L.starts_with(">") != Quote))
        break;
      if (Quote)
        L = L.drop_front(1);
      Text += (Text.empty() ? "" : " ") + L.trim().str();
    }
    OS << (Quote ? "<blockquote><p>" : "<p>");
    printInline(Text, LinkFor, OS);
    OS << (Quote ? "</p></blockquote>\n" : "</p>\n");
  }
}

} // namespace torchtidy::html
