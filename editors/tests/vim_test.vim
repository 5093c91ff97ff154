" Headless test of editors/vim (syntax, ftdetect, indent). Run from anywhere:
"   vim -Nu NONE -i NONE -es -S editors/tests/vim_test.vim
"   nvim --headless -u NONE -i NONE -es -S editors/tests/vim_test.vim
" Prints a report on stdout; exits 0 when every check passes, 1 otherwise.
"
" Highlighting: the assertions of editors/tests/fixture.dp are written in TextMate scopes;
" s:groups below says which Vim syntax groups stand for a scope (scopes with no entry, such as
" punctuation or parameters, are not highlighted by the Vim syntax and are skipped).
" Indentation: editors/tests/indent.dp is scrambled, re-indented with `gg=G`, and compared.

set nocompatible
let s:root = fnamemodify(resolve(expand('<sfile>:p')), ':h:h:h')
let s:out = []
let s:failures = 0

function! s:Log(msg) abort
  call add(s:out, a:msg)
endfunction

function! s:Fail(msg) abort
  let s:failures += 1
  call s:Log('FAIL ' . a:msg)
endfunction

function! s:Finish() abort
  call s:Log(printf('vim editor tests: %s', s:failures == 0 ? 'ok' : s:failures . ' failure(s)'))
  call writefile(s:out, '/dev/stdout', 'a')
  if s:failures == 0
    qall!
  else
    cquit!
  endif
endfunction

" TextMate scope (dot-prefix) -> Vim syntax groups.
let s:groups = {
      \ 'comment': ['dpLineComment', 'dpBlockComment'],
      \ 'string': ['dpString'],
      \ 'constant.character.escape': ['dpEscape'],
      \ 'invalid': ['dpInvalidEscape', 'dpError'],
      \ 'constant.numeric.integer': ['dpInteger'],
      \ 'constant.numeric.float': ['dpFloat'],
      \ 'keyword.control': ['dpConditional'],
      \ 'keyword.control.import': ['dpImport'],
      \ 'keyword.other': ['dpKeyword'],
      \ 'keyword.operator': ['dpOperator', 'dpTypeArrow', 'dpTypeDeclOp', 'dpRowBar', 'dpTypeColon'],
      \ 'keyword.operator.word': ['dpOperatorKeyword'],
      \ 'keyword.operator.type.annotation': ['dpTypeColon'],
      \ 'constant.language.boolean': ['dpBoolean'],
      \ 'constant.language.unit': ['dpUnit'],
      \ 'constant.language.empty-list': ['dpEmptyList'],
      \ 'support.function.builtin': ['dpBuiltin'],
      \ 'support.type': ['dpBuiltinType'],
      \ 'entity.name.type': ['dpTypeName'],
      \ 'entity.name.type.parameter': ['dpTypeVar'],
      \ 'constant.other.constructor': ['dpConstructor', 'dpConstructorDecl'],
      \ 'entity.name.function': ['dpFunction'],
      \ 'entity.name.namespace': ['dpModuleName'],
      \ 'meta.type.annotation': ['dpTypeAnnot'],
      \ }

function! s:IsPrefix(prefix, scope) abort
  return a:scope ==# a:prefix || stridx(a:scope, a:prefix . '.') == 0
endfunction

" Groups that must be present for a scope: those of the longest mapped prefix.
function! s:PositiveGroups(scope) abort
  let best = ''
  for key in keys(s:groups)
    if s:IsPrefix(key, a:scope) && len(key) > len(best)
      let best = key
    endif
  endfor
  return best ==# '' ? [] : s:groups[best]
endfunction

" Groups that must be absent for a scope: those of every mapped scope inside it or around it.
function! s:NegativeGroups(scope) abort
  let result = []
  for key in keys(s:groups)
    if s:IsPrefix(key, a:scope) || s:IsPrefix(a:scope, key)
      call extend(result, s:groups[key])
    endif
  endfor
  return result
endfunction

function! s:Stack(lnum, col) abort
  return map(synstack(a:lnum, a:col), 'synIDattr(v:val, "name")')
endfunction

function! s:CheckHighlighting() abort
  let fixture = s:root . '/editors/tests/fixture.dp'
  execute 'edit ' . fnameescape(fixture)
  if &filetype !=# 'dp'
    call s:Fail('ftdetect: filetype of fixture.dp is "' . &filetype . '", expected "dp"')
    return
  endif
  if get(b:, 'current_syntax', '') !=# 'dp'
    call s:Fail('syntax/dp.vim was not loaded')
    return
  endif
  let checked = 0
  let skipped = 0
  let target = 0
  for lnum in range(1, line('$'))
    let line = getline(lnum)
    let m = matchlist(line, '^\(\s*\)//\(\s*\)\(\^\+\|<-\)\(.*\)$')
    if empty(m)
      let target = lnum
      continue
    endif
    if m[3] ==# '<-'
      let start = len(m[1])
      let width = 1
    else
      let start = len(m[1]) + 2 + len(m[2])
      let width = len(m[3])
    endif
    let words = split(m[4])
    let dash = index(words, '-')
    let present = dash < 0 ? words : words[: dash - 1]
    let absent = dash < 0 ? [] : words[dash + 1 :]
    if dash == 0
      let present = []
    endif
    for col in range(start + 1, start + width)
      let stack = s:Stack(target, col)
      let where = printf('fixture.dp:%d:%d (assertion line %d, %s)', target, col, lnum,
            \ string(strpart(getline(target), col - 1, 10)))
      for scope in present
        let want = s:PositiveGroups(scope)
        if empty(want)
          let skipped += 1
          continue
        endif
        let checked += 1
        if empty(filter(copy(stack), 'index(want, v:val) >= 0'))
          call s:Fail(printf('%s: %s wants one of %s; syntax stack is %s', where, scope, string(want), string(stack)))
        endif
      endfor
      for scope in absent
        let avoid = s:NegativeGroups(scope)
        if empty(avoid)
          let skipped += 1
          continue
        endif
        let checked += 1
        let found = filter(copy(stack), 'index(avoid, v:val) >= 0')
        if !empty(found)
          call s:Fail(printf('%s: not %s, but syntax stack is %s', where, scope, string(stack)))
        endif
      endfor
    endfor
  endfor
  call s:Log(printf('highlighting: %d checks, %d skipped (scopes the Vim syntax does not distinguish)', checked, skipped))
  if checked < 150
    call s:Fail('too few highlighting checks: ' . checked)
  endif
  bwipeout!
endfunction

function! s:CheckIndent() abort
  let fixture = s:root . '/editors/tests/indent.dp'
  execute 'edit ' . fnameescape(fixture)
  if &indentexpr !~# 'GetDpIndent'
    call s:Fail('indent/dp.vim was not loaded (indentexpr=' . &indentexpr . ')')
    return
  endif
  let expected = getline(1, '$')
  " Scramble every indented line that is not inside a block comment, then re-indent.
  for lnum in range(1, line('$'))
    let line = getline(lnum)
    let first = match(line, '\S') + 1
    if first > 1 && index(s:Stack(lnum, first), 'dpBlockComment') < 0
      call setline(lnum, repeat(' ', 5) . substitute(line, '^\s*', '', ''))
    endif
  endfor
  normal! gg=G
  let got = getline(1, '$')
  let bad = 0
  for i in range(len(expected))
    if got[i] !=# expected[i]
      let bad += 1
      call s:Fail(printf('indent.dp:%d: expected %s, got %s', i + 1, string(expected[i]), string(got[i])))
    endif
  endfor
  call s:Log(printf('indentation: %d lines, %d wrong', len(expected), bad))

  " A new line after a match arm's arrow: two levels past the `|`.
  %delete _
  call setline(1, ['let f x =', '  match x with', '  | 0 ->'])
  call cursor(3, 1)
  execute "normal! o1\<Esc>"
  if getline(4) !=# '      1'
    call s:Fail('new line after `| 0 ->`: got ' . string(getline(4)))
  endif
  bwipeout!
endfunction

try
  let &runtimepath = s:root . '/editors/vim,' . &runtimepath
  filetype plugin indent on
  syntax on
  call s:CheckHighlighting()
  call s:CheckIndent()
catch
  call s:Fail('exception: ' . v:exception . ' at ' . v:throwpoint)
endtry
call s:Finish()
