// torch-tidy report: filters by check and file and a search box, offline.
// The page is complete without this script; it only hides findings. The
// state lives in the URL fragment (#check=...&file=...&q=...), so a link
// can open the page filtered. A script error is written into the page
// (#script-errors, body[data-script-errors]) so that a test can see it;
// body[data-ready] says that the script ran to the end.
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

  var findings = document.querySelectorAll('#findings > article.f');
  var checkSelect = document.getElementById('filter-check');
  var fileSelect = document.getElementById('filter-file');
  var search = document.getElementById('search');
  var shown = document.getElementById('shown');
  var noMatch = document.getElementById('no-match');
  var texts = null; // each finding's text, lower case, made on first search
  var fileIndexByPath = {};
  var checkNames = {};
  var i;
  for (i = 0; i < fileSelect.options.length; i++) {
    var option = fileSelect.options[i];
    if (option.value) fileIndexByPath[option.getAttribute('data-path')] = option.value;
  }
  for (i = 0; i < checkSelect.options.length; i++) {
    checkNames[checkSelect.options[i].value] = true;
  }

  function decode(text) {
    try {
      return decodeURIComponent(text.replace(/\+/g, ' '));
    } catch (e) {
      return '';
    }
  }

  // Reads the filters from the fragment; false for a plain anchor (#f12).
  function readFragment() {
    var fragment = location.hash.slice(1);
    if (fragment.indexOf('=') < 0) return false;
    var params = {};
    fragment.split('&').forEach(function (pair) {
      var eq = pair.indexOf('=');
      if (eq > 0) params[pair.slice(0, eq)] = decode(pair.slice(eq + 1));
    });
    checkSelect.value = params.check && checkNames[params.check] ? params.check : '';
    var fileIndex = params.file ? fileIndexByPath[params.file] : undefined;
    fileSelect.value = fileIndex === undefined ? '' : fileIndex;
    search.value = params.q || '';
    return true;
  }

  function writeFragment() {
    var parts = [];
    if (checkSelect.value) parts.push('check=' + encodeURIComponent(checkSelect.value));
    if (fileSelect.value) {
      var path = fileSelect.options[fileSelect.selectedIndex].getAttribute('data-path');
      parts.push('file=' + encodeURIComponent(path));
    }
    if (search.value) parts.push('q=' + encodeURIComponent(search.value));
    var url = parts.length ? '#' + parts.join('&') : location.pathname + location.search;
    try {
      history.replaceState(null, '', url);
    } catch (e) {
      // Some browsers refuse it for file: URLs; the filters still work.
    }
  }

  function apply() {
    var check = checkSelect.value;
    var file = fileSelect.value;
    var query = search.value.trim().toLowerCase();
    if (query && !texts) {
      texts = [];
      for (var k = 0; k < findings.length; k++) texts.push(findings[k].textContent.toLowerCase());
    }
    var count = 0;
    for (var j = 0; j < findings.length; j++) {
      var f = findings[j];
      var show = (!check || f.getAttribute('data-check') === check) &&
                 (!file || f.getAttribute('data-file') === file) &&
                 (!query || texts[j].indexOf(query) >= 0);
      if (f.hidden === show) f.hidden = !show;
      if (show) count++;
    }
    shown.textContent = count === findings.length
      ? count + ' findings'
      : count + ' of ' + findings.length + ' findings shown';
    shown.setAttribute('data-shown', String(count));
    noMatch.hidden = count > 0 || findings.length === 0;
  }

  function changed() {
    apply();
    writeFragment();
  }

  var pending = 0;
  checkSelect.addEventListener('change', changed);
  fileSelect.addEventListener('change', changed);
  search.addEventListener('input', function () {
    clearTimeout(pending);
    pending = setTimeout(changed, 150);
  });
  window.addEventListener('hashchange', function () {
    if (readFragment()) {
      apply();
      document.getElementById('filters').scrollIntoView();
    }
  });
  document.addEventListener('keydown', function (e) {
    if (e.key === '/' && document.activeElement !== search) {
      e.preventDefault();
      search.focus();
    }
  });

  readFragment();
  apply();
  document.getElementById('filters').hidden = false;
  document.body.setAttribute('data-ready', '1');
})();
