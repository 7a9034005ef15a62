// torch-tidy report: draws the findings from the page's data island
// (#report-data, written by driver/HtmlFinding.cpp, which decides what is
// shown) a hundred at a time, and filters them by check, by file, by a
// search and (against a baseline) to the new ones, offline. Text goes into the page only as text (textContent),
// never as markup. The filters live in the URL fragment
// (#check=...&file=...&q=...&new=1), so a link can open the page filtered;
// #f12 shows finding 12.
//
// For tests and bench/html_report.py: a script error is written into the
// page (#script-errors, body[data-script-errors]); body[data-ready] says
// that the script ran to the end, body[data-load-ms] when the page was
// loaded and laid out, in the browser's own clock.
(function () {
  'use strict';
  var errorCount = 0;
  function reportError(text) {
    errorCount += 1;
    var box = document.getElementById('script-errors');
    if (!box) {
      box = document.createElement('pre');
      box.id = 'script-errors';
      document.body.insertBefore(box, document.body.firstChild);
    }
    box.textContent += text + '\n';
    document.body.setAttribute('data-script-errors', String(errorCount));
  }
  window.addEventListener('error', function (e) {
    reportError('script error: ' + e.message + ' (line ' + e.lineno + ')');
  });
  window.addEventListener('unhandledrejection', function (e) {
    reportError('unhandled rejection: ' + e.reason);
  });

  var BATCH = 100;
  var data = JSON.parse(document.getElementById('report-data').textContent);
  var findings = data.findings;
  var list = document.getElementById('finding-list');
  var more = document.getElementById('more');
  var moreButton = document.getElementById('more-button');
  var checkSelect = document.getElementById('filter-check');
  var fileSelect = document.getElementById('filter-file');
  var search = document.getElementById('search');
  var newOnly = document.getElementById('filter-new'); // with a baseline only
  var shown = document.getElementById('shown');
  var noMatch = document.getElementById('no-match');
  var matches = []; // indices of the findings that pass the filters
  var drawn = 0; // how many of them are in the list
  var texts = []; // each finding's text in lower case, for the search

  function el(tag, className, text) {
    var node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  // A step is [file index or -1, line, column, message index].
  function position(step) {
    return step[0] < 0 ? '(no location)' : data.files[step[0]] + ':' + step[1] + ':' + step[2];
  }

  function lineText(file, line) {
    var entry = (data.sources[file] || {})[line];
    return Array.isArray(entry) ? entry : [entry === undefined ? '' : entry, 0];
  }

  // The index in text of byte column (1-based) of its UTF-8 encoding.
  function charIndex(text, column) {
    var bytes = 0;
    for (var i = 0; i < text.length; i++) {
      if (bytes >= column - 1) return i;
      var c = text.charCodeAt(i);
      if (c >= 0xD800 && c <= 0xDBFF) { bytes += 4; i++; } else bytes += c < 0x80 ? 1 : c < 0x800 ? 2 : 3;
    }
    return bytes >= column - 1 ? text.length : -1;
  }

  // A source line, the token at each of its steps' columns marked.
  function sourceLine(finding, file, line) {
    var entry = lineText(file, line);
    var text = entry[0];
    var starts = [];
    var kind = '';
    finding.steps.forEach(function (step, k) {
      if (step[0] !== file || step[1] !== line) return;
      if (!kind) kind = k === 0 ? ' hw' : ' hn';
      var start = charIndex(text, step[2]);
      if (start >= 0 && start < text.length) starts.push(start);
    });
    starts.sort(function (a, b) { return a - b; });
    var div = el('div', 'ln' + kind);
    div.appendChild(el('i', null, String(line)));
    var pos = 0;
    starts.forEach(function (start) {
      if (start < pos) return;
      var end = start + 1;
      if (/\w/.test(text[start])) while (end < text.length && /\w/.test(text[end])) end++;
      div.appendChild(document.createTextNode(text.slice(pos, start)));
      div.appendChild(el('mark', null, text.slice(start, end)));
      pos = end;
    });
    div.appendChild(document.createTextNode(text.slice(pos)));
    if (entry[1]) div.appendChild(el('span', 'cut', '\u2026 (' + entry[1] + ' more bytes)'));
    return div;
  }

  function bubble(step, number, withPosition) {
    var div = el('div', 'st ' + (number === 1 ? 'w' : 'n'));
    div.appendChild(el('b', null, String(number)));
    if (withPosition) {
      div.appendChild(el('span', 'at', position(step)));
      div.appendChild(document.createTextNode(' '));
    }
    div.appendChild(document.createTextNode(data.messages[step[3]]));
    return div;
  }

  function caption(parent, file, finding) {
    if (file >= 0 && file !== finding.steps[0][0]) parent.appendChild(el('div', 'cap', data.files[file]));
  }

  function drawFinding(index) {
    var f = findings[index];
    var check = data.checks[f.check];
    var number = index + 1;
    var article = el('article', 'f g-' + check.group + (f['new'] ? ' new' : ''));
    article.id = 'f' + number;
    article.setAttribute('data-check', f.check);
    article.setAttribute('data-file', String(f.steps[0][0]));
    var head = el('h3');
    var link = el('a', 'num', '#' + number);
    link.href = '#f' + number;
    head.appendChild(link);
    head.appendChild(el('span', 'lv lv-' + f.level, f.level));
    if (f['new']) head.appendChild(el('span', 'lv lv-new', 'new'));
    var name = el(check.docs ? 'a' : 'span', 'chk', f.check);
    if (check.docs) name.href = check.docs;
    head.appendChild(name);
    head.appendChild(el('span', 'loc', position(f.steps[0])));
    article.appendChild(head);
    (f.problems || []).forEach(function (text) { article.appendChild(el('p', 'stale', text)); });
    f.blocks.forEach(function (block) {
      var src = el('div', 'src');
      caption(src, block.file, f);
      if (block.unreadable) {
        src.appendChild(el('p', 'na', 'The source is not available: ' +
                           data.files[block.file] + ' cannot be read.'));
      }
      block.rows.forEach(function (row) {
        if (row > 0) src.appendChild(sourceLine(f, block.file, row));
        else if (row === 0) src.appendChild(el('div', 'gap', '\u22ef'));
        else src.appendChild(bubble(f.steps[-row - 1], -row, false));
      });
      (block.listed || []).forEach(function (n) {
        src.appendChild(bubble(f.steps[n - 1], n, block.file >= 0));
      });
      article.appendChild(src);
    });
    if (f.fixes) {
      var fix = el('div', 'fix');
      fix.appendChild(el('div', 'cap', 'Fix-it'));
      f.fixes.forEach(function (change) {
        var diff = el('div', 'src diff');
        caption(diff, change.file, f);
        (change.diff || []).forEach(function (row) {
          var div = el('div', 'ln ' + (row[1] === '-' ? 'del' : 'add'));
          div.appendChild(el('i', null, String(row[0])));
          div.appendChild(document.createTextNode(row[1] + ' ' + row[2]));
          diff.appendChild(div);
        });
        (change.replace || []).forEach(function (text) { diff.appendChild(el('div', 'st n', text)); });
        fix.appendChild(diff);
      });
      article.appendChild(fix);
    }
    return article;
  }

  function searchText(index) {
    if (texts[index] === undefined) {
      var f = findings[index];
      var parts = [f.check, position(f.steps[0])];
      f.steps.forEach(function (step) { parts.push(data.messages[step[3]]); });
      f.blocks.forEach(function (block) {
        block.rows.forEach(function (row) { if (row > 0) parts.push(lineText(block.file, row)[0]); });
      });
      texts[index] = parts.join('\n').toLowerCase();
    }
    return texts[index];
  }

  // Draws the next batch of matches, or up to match number upTo.
  function drawMore(upTo) {
    var end = Math.min(matches.length, Math.max(drawn + BATCH, upTo || 0));
    var batch = document.createDocumentFragment();
    for (; drawn < end; drawn++) batch.appendChild(drawFinding(matches[drawn]));
    list.appendChild(batch);
    var left = matches.length - drawn;
    more.hidden = left === 0;
    moreButton.textContent = 'Show ' + Math.min(BATCH, left) + ' more (' + left + ' not shown yet)';
  }

  function apply() {
    var check = checkSelect.value;
    var file = fileSelect.value;
    var query = search.value.trim().toLowerCase();
    var onlyNew = newOnly !== null && newOnly.checked;
    matches = [];
    for (var i = 0; i < findings.length; i++) {
      var f = findings[i];
      if ((!check || f.check === check) && (!file || String(f.steps[0][0]) === file) &&
          (!onlyNew || f['new']) &&
          (!query || searchText(i).indexOf(query) >= 0)) matches.push(i);
    }
    list.textContent = '';
    drawn = 0;
    drawMore();
    shown.textContent = matches.length === findings.length
      ? findings.length + ' findings'
      : matches.length + ' of ' + findings.length + ' findings shown';
    shown.setAttribute('data-shown', String(matches.length));
    noMatch.hidden = matches.length > 0 || findings.length === 0;
  }

  function decode(text) {
    try {
      return decodeURIComponent(text.replace(/\+/g, ' '));
    } catch (e) {
      return '';
    }
  }

  function hasOption(select, value) {
    for (var i = 0; i < select.options.length; i++) if (select.options[i].value === value) return true;
    return false;
  }

  function fileIndexOf(path) {
    for (var i = 0; i < fileSelect.options.length; i++) {
      if (fileSelect.options[i].getAttribute('data-path') === path) return fileSelect.options[i].value;
    }
    return '';
  }

  // Sets the filters from the fragment; false when it holds none.
  function readFragment() {
    var fragment = location.hash.slice(1);
    if (fragment.indexOf('=') < 0) return false;
    var params = {};
    fragment.split('&').forEach(function (pair) {
      var eq = pair.indexOf('=');
      if (eq > 0) params[pair.slice(0, eq)] = decode(pair.slice(eq + 1));
    });
    checkSelect.value = params.check && hasOption(checkSelect, params.check) ? params.check : '';
    fileSelect.value = params.file ? fileIndexOf(params.file) : '';
    search.value = params.q || '';
    if (newOnly) newOnly.checked = params['new'] === '1';
    return true;
  }

  function writeFragment() {
    var parts = [];
    if (checkSelect.value) parts.push('check=' + encodeURIComponent(checkSelect.value));
    if (fileSelect.value) {
      parts.push('file=' + encodeURIComponent(fileSelect.options[fileSelect.selectedIndex].getAttribute('data-path')));
    }
    if (search.value) parts.push('q=' + encodeURIComponent(search.value));
    if (newOnly && newOnly.checked) parts.push('new=1');
    try {
      history.replaceState(null, '', parts.length ? '#' + parts.join('&') : location.pathname + location.search);
    } catch (e) {
      // Some browsers refuse it for file: URLs; the filters still work.
    }
  }

  // #f12: draws finding 12 (clearing the filters that hide it) and shows it.
  function showFinding() {
    var match = /^#f(\d+)$/.exec(location.hash);
    if (!match) return;
    var index = Number(match[1]) - 1;
    if (index < 0 || index >= findings.length) return;
    if (matches.indexOf(index) < 0) {
      checkSelect.value = fileSelect.value = search.value = '';
      if (newOnly) newOnly.checked = false;
      apply();
    }
    drawMore(matches.indexOf(index) + 1);
    document.getElementById('f' + (index + 1)).scrollIntoView();
  }

  function changed() {
    apply();
    writeFragment();
  }

  var pending = 0;
  checkSelect.addEventListener('change', changed);
  fileSelect.addEventListener('change', changed);
  if (newOnly) newOnly.addEventListener('change', changed);
  search.addEventListener('input', function () {
    clearTimeout(pending);
    pending = setTimeout(changed, 200);
  });
  moreButton.addEventListener('click', function () { drawMore(); });
  if ('IntersectionObserver' in window) {
    new IntersectionObserver(function (entries) {
      if (entries[0].isIntersecting && !more.hidden) drawMore();
    }, { rootMargin: '600px' }).observe(more);
  }
  window.addEventListener('hashchange', function () {
    if (readFragment()) {
      apply();
      document.getElementById('filters').scrollIntoView();
    } else {
      showFinding();
    }
  });
  document.addEventListener('keydown', function (e) {
    if (e.key === '/' && document.activeElement !== search) {
      e.preventDefault();
      search.focus();
    }
  });
  window.addEventListener('load', function () {
    document.body.getBoundingClientRect(); // the layout that the first paint needs
    document.body.setAttribute('data-load-ms', String(Math.round(performance.now())));
  });

  readFragment();
  apply();
  showFinding();
  document.getElementById('filters').hidden = false;
  document.body.setAttribute('data-ready', '1');
})();
