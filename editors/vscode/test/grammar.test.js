// Headless tests of the dp TextMate grammar (editors/vscode/syntaxes/dp.tmLanguage.json)
// and of the VS Code extension manifest. Run: `npm ci && npm test` in this folder
// (extension.test.js, run by `npm test` too, covers extension.js).
//
// 1. The assertions in editors/tests/fixture.dp (Sublime-style `// ^^^ scope` lines) must hold.
// 2. Every examples/*.dp and stdlib/*.dp file (and those in $DP_GRAMMAR_EXTRA_DIRS) tokenizes in time, without any `invalid` scope,
//    and leaves the grammar back at top level (no comment, string or annotation left open).
'use strict';

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const vsctm = require('vscode-textmate');
const oniguruma = require('vscode-oniguruma');

const VSCODE_DIR = path.resolve(__dirname, '..');
const EDITORS_DIR = path.resolve(VSCODE_DIR, '..');
const REPO_DIR = path.resolve(EDITORS_DIR, '..');
const GRAMMAR_PATH = path.join(VSCODE_DIR, 'syntaxes', 'dp.tmLanguage.json');
const FIXTURE_PATH = path.join(EDITORS_DIR, 'tests', 'fixture.dp');
const LINE_TIME_LIMIT_MS = 2000;

const readJson = (p) => JSON.parse(fs.readFileSync(p, 'utf8'));

let grammarPromise;
function loadGrammar() {
  if (!grammarPromise) {
    const wasm = fs.readFileSync(path.join(path.dirname(require.resolve('vscode-oniguruma')), 'onig.wasm'));
    const onigLib = oniguruma.loadWASM(wasm.buffer.slice(wasm.byteOffset, wasm.byteOffset + wasm.byteLength)).then(() => ({
      createOnigScanner: (patterns) => new oniguruma.OnigScanner(patterns),
      createOnigString: (s) => new oniguruma.OnigString(s),
    }));
    const registry = new vsctm.Registry({
      onigLib,
      loadGrammar: async (scopeName) => {
        if (scopeName !== 'source.dp') return null;
        return vsctm.parseRawGrammar(fs.readFileSync(GRAMMAR_PATH, 'utf8'), GRAMMAR_PATH);
      },
    });
    grammarPromise = registry.loadGrammar('source.dp');
  }
  return grammarPromise;
}

/** Tokenizes `text`; returns one entry per line: { line, tokens: [{startIndex, endIndex, scopes}] }. */
async function tokenize(text, file) {
  const grammar = await loadGrammar();
  let stack = vsctm.INITIAL;
  const lines = text.split(/\r?\n/);
  const out = [];
  lines.forEach((line, i) => {
    const r = grammar.tokenizeLine(line, stack, LINE_TIME_LIMIT_MS);
    assert.ok(!r.stoppedEarly, `${file}:${i + 1}: tokenization did not finish in ${LINE_TIME_LIMIT_MS} ms`);
    out.push({ line, tokens: r.tokens });
    stack = r.ruleStack;
  });
  return { lines: out, stack };
}

function scopesAt(tokens, col) {
  const t = tokens.find((tok) => tok.startIndex <= col && col < tok.endIndex);
  return t ? t.scopes : null;
}

/** `keyword.other` matches the scope `keyword.other.dp` (dot-separated prefix). */
const hasScope = (scopes, wanted) => scopes.some((s) => s === wanted || s.startsWith(wanted + '.'));

/**
 * Parses the assertion lines of a fixture: `// ^^^ scope scope - absent absent` or
 * `// <- scope`. Returns [{ line (0-based target), cols: [..], present: [..], absent: [..], at }].
 * The same format is read by editors/tests/vim_test.vim and editors/emacs/dp-mode-tests.el.
 */
function parseAssertions(text) {
  const lines = text.split(/\r?\n/);
  const assertions = [];
  let target = -1;
  lines.forEach((line, i) => {
    const m = /^(\s*)\/\/(\s*)(\^+|<-)(.*)$/.exec(line);
    if (!m) {
      target = i;
      return;
    }
    assert.ok(target >= 0, `fixture line ${i + 1}: an assertion with no line above it`);
    const start = m[3] === '<-' ? m[1].length : m[1].length + 2 + m[2].length;
    const width = m[3] === '<-' ? 1 : m[3].length;
    const words = m[4].trim().split(/\s+/).filter(Boolean);
    const dash = words.indexOf('-');
    const present = dash < 0 ? words : words.slice(0, dash);
    const absent = dash < 0 ? [] : words.slice(dash + 1);
    assert.ok(present.length + absent.length > 0, `fixture line ${i + 1}: no scopes`);
    const cols = [];
    for (let c = start; c < start + width; c++) cols.push(c);
    assertions.push({ line: target, cols, present, absent, at: i + 1 });
  });
  return assertions;
}

/** Checks that the grammar is back at top level: a fresh item line gets only top-level scopes. */
async function assertTopLevelAfter(text, file) {
  const { lines } = await tokenize(text + '\nlet zz_sentinel = 0', file);
  const last = lines[lines.length - 1];
  assert.deepEqual(scopesAt(last.tokens, 0), ['source.dp', 'keyword.other.dp'],
    `${file}: a construct is left open at the end of the file`);
}

function listDpFiles(dir) {
  if (!fs.existsSync(dir)) return [];
  return fs.readdirSync(dir, { withFileTypes: true })
    .filter((e) => e.isFile() && e.name.endsWith('.dp'))
    .map((e) => path.join(dir, e.name))
    .sort();
}

// ---------------------------------------------------------------------------------------------

test('extension manifest is coherent', () => {
  const pkg = readJson(path.join(VSCODE_DIR, 'package.json'));
  assert.ok(fs.existsSync(path.join(VSCODE_DIR, pkg.main)), 'main entry exists');
  assert.ok(pkg.dependencies && pkg.dependencies['vscode-languageclient'], 'vscode-languageclient is a dependency');
  const lang = pkg.contributes.languages.find((l) => l.id === 'dp');
  assert.ok(lang, 'language dp contributed');
  assert.ok(lang.extensions.includes('.dp'));
  const conf = readJson(path.join(VSCODE_DIR, lang.configuration));
  assert.deepEqual(conf.comments, { lineComment: '//', blockComment: ['/*', '*/'] });
  const g = pkg.contributes.grammars.find((x) => x.language === 'dp');
  assert.equal(g.scopeName, 'source.dp');
  const grammar = readJson(path.join(VSCODE_DIR, g.path));
  assert.equal(grammar.scopeName, 'source.dp');
  const js = fs.readFileSync(path.join(VSCODE_DIR, pkg.main), 'utf8');
  assert.match(js, /vscode-languageclient\/node/);
  assert.match(js, /'lsp'/);
});

test('language configuration indentation rules', () => {
  const conf = readJson(path.join(VSCODE_DIR, 'language-configuration.json'));
  const inc = new RegExp(conf.indentationRules.increaseIndentPattern);
  const dec = new RegExp(conf.indentationRules.decreaseIndentPattern);
  for (const l of ['let f x =', 'let f x =  // comment', '  fun x ->', 'if c then', '  else', 'let y = 1 in',
    'match x with', '  foo (', 'let xs = [', 'let r = {', 'type T =']) {
    assert.match(l, inc, `increase after ${JSON.stringify(l)}`);
  }
  for (const l of ['let x = 1', 'a == b', 'a != b', 'x <= y', 'x >= y', 'r := 1', 'f (x)', 'else_branch',
    '// then', 'let s = "then"', 'let within = 1']) {
    assert.doesNotMatch(l, inc, `no increase after ${JSON.stringify(l)}`);
  }
  for (const l of ['  )', ']', '  }', '  else', 'in', '  in x']) assert.match(l, dec, `decrease at ${JSON.stringify(l)}`);
  for (const l of ['  elsewhere', '  inner', '  x)']) assert.doesNotMatch(l, dec, `no decrease at ${JSON.stringify(l)}`);
});

test('grammar: every include resolves and every regex compiles', async () => {
  const grammar = readJson(GRAMMAR_PATH);
  const repo = grammar.repository;
  const regexes = [];
  const walk = (node, where) => {
    if (Array.isArray(node)) return node.forEach((n, i) => walk(n, `${where}[${i}]`));
    if (!node || typeof node !== 'object') return;
    if (typeof node.include === 'string') {
      const inc = node.include;
      if (inc.startsWith('#')) assert.ok(repo[inc.slice(1)], `${where}: unknown include ${inc}`);
      else assert.ok(inc === '$self' || inc === '$base', `${where}: external include ${inc}`);
    }
    for (const k of ['match', 'begin', 'end', 'while']) if (typeof node[k] === 'string') regexes.push([`${where}.${k}`, node[k]]);
    for (const [k, v] of Object.entries(node)) if (typeof v === 'object') walk(v, `${where}.${k}`);
  };
  walk(grammar, 'grammar');
  await loadGrammar();
  for (const [where, re] of regexes) {
    assert.doesNotThrow(() => new oniguruma.OnigScanner([re]), `${where}: bad regex ${re}`);
  }
  // Every repository entry is used somewhere.
  const text = JSON.stringify(grammar.patterns) + JSON.stringify(repo);
  for (const name of Object.keys(repo)) assert.ok(text.includes(`"#${name}"`), `repository.${name} is never included`);
});

test('fixture assertions hold', async () => {
  const text = fs.readFileSync(FIXTURE_PATH, 'utf8');
  const assertions = parseAssertions(text);
  assert.ok(assertions.length > 100, `expected many assertions, found ${assertions.length}`);
  const { lines } = await tokenize(text, 'fixture.dp');
  const failures = [];
  for (const a of assertions) {
    const { line, tokens } = lines[a.line];
    for (const col of a.cols) {
      const scopes = scopesAt(tokens, col);
      const where = `fixture.dp:${a.line + 1}:${col + 1} (assertion on line ${a.at}, ${JSON.stringify(line.slice(col, col + 12))})`;
      if (!scopes) {
        failures.push(`${where}: no token`);
        continue;
      }
      for (const s of a.present) if (!hasScope(scopes, s)) failures.push(`${where}: missing ${s}; got ${scopes.join(' ')}`);
      for (const s of a.absent) if (hasScope(scopes, s)) failures.push(`${where}: unexpected ${s}; got ${scopes.join(' ')}`);
    }
  }
  assert.deepEqual(failures, [], `\n${failures.join('\n')}`);
  console.log(`${assertions.length} fixture assertions checked`);
  await assertTopLevelAfter(text, 'fixture.dp');
});

test('example and stdlib programs tokenize without invalid scopes', async () => {
  // DP_GRAMMAR_EXTRA_DIRS (colon-separated) adds more folders of .dp files to check.
  const dirs = [path.join(REPO_DIR, 'examples'), path.join(REPO_DIR, 'stdlib'),
    ...(process.env.DP_GRAMMAR_EXTRA_DIRS || '').split(':').filter(Boolean)];
  const files = dirs.flatMap(listDpFiles);
  console.log(`tokenizing ${files.length} .dp file(s) from ${dirs.map((d) => path.relative(REPO_DIR, d) || '.').join(', ')}`);
  for (const file of files) {
    const rel = path.relative(REPO_DIR, file);
    const text = fs.readFileSync(file, 'utf8');
    const { lines } = await tokenize(text, rel);
    const bad = [];
    lines.forEach(({ line, tokens }, i) => {
      for (const t of tokens) {
        if (t.scopes.some((s) => s.startsWith('invalid'))) {
          bad.push(`${rel}:${i + 1}:${t.startIndex + 1}: ${JSON.stringify(line.slice(t.startIndex, t.endIndex))} is ${t.scopes.join(' ')}`);
        }
      }
    });
    assert.deepEqual(bad, [], `\n${bad.join('\n')}`);
    await assertTopLevelAfter(text, rel);
  }
});

module.exports = { parseAssertions };
