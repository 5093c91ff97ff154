" Vim indent file
" Language: dp
"
" dp is layout-sensitive: a line whose first token is in column 1 starts a new item. So this
" never moves a column-1 line that begins an item unless the line above clearly continues
" (ends with `=`, `->`, `then`, `else`, `in`, `with`, `;`, `,`, an operator or an open bracket).
" Otherwise (same rules as editors/emacs/dp-mode.el):
"   - one shiftwidth more after a line ending with `=`, `->`, `then`, `else`, `with` or an open
"     bracket, or before a line starting with an infix operator;
"   - a closing bracket lines up with the line that opened it;
"   - `| pattern ->` lines up with the `match` of its `match ... with` line (one shiftwidth in
"     when `match` is not first on that line, or after `type T =`), `else` with its `if`, `in`
"     with its `let`; an arm body on the next line goes two shiftwidths past the `|`;
"   - a line starting with an infix operator goes one shiftwidth in after a `let` or column-1
"     line, and lines up with the line above otherwise;
"   - `type`, `import` and a `let` after a finished line start in column 1.

if exists("b:did_indent")
  finish
endif
let b:did_indent = 1

setlocal indentexpr=GetDpIndent(v:lnum)
setlocal indentkeys=0{,0},0),0],0\|,!^F,o,O,0=else
setlocal nolisp nosmartindent autoindent

let b:undo_indent = "setl inde< indk< lisp< si< ai<"

if exists("*GetDpIndent")
  finish
endif

let s:cpo_save = &cpo
set cpo&vim

let s:opens = '\%([=!<>:]\@<!=\|->\|\<then\|\<else\|\<with\|[([{]\)'
let s:increase = s:opens . '\s*$'
let s:continues = '\%(' . s:opens . '\|\<in\|[;,]\|[-+*/%@<>&|:=]\)\s*$'
let s:starts_infix = '^\s*\%(|>\|||\|&&\|::\|++\|\*\*\|==\|!=\|<=\|>=\|:=\|/[/*]\@!\|[-+*%@<>]\)'
let s:item_start = '^\%(\%(in\|and\|then\|else\|with\)\>\)\@![A-Za-z0-9_"(\[{!/]'

" The code of a line: strings emptied, comments removed, trailing blanks dropped.
function! s:Code(lnum) abort
  let line = getline(a:lnum)
  let line = substitute(line, '"\%([^"\\]\|\\.\)*"', '""', 'g')
  let line = substitute(line, '/\*.\{-}\*/', ' ', 'g')
  let line = substitute(line, '//.*$', '', '')
  return substitute(line, '\s\+$', '', '')
endfunction

function! s:InSyntax(lnum, col, groups) abort
  for id in synstack(a:lnum, a:col)
    if synIDattr(id, 'name') =~# '^dp\%(' . a:groups . '\)$'
      return 1
    endif
  endfor
  return 0
endfunction

function! s:CommentDepth(lnum, col) abort
  return len(filter(synstack(a:lnum, a:col), 'synIDattr(v:val, "name") ==# "dpBlockComment"'))
endfunction

" Whether a line holds nothing but comments (as far as syntax highlighting tells).
function! s:IsComment(lnum) abort
  let line = getline(a:lnum)
  let first = match(line, '\S') + 1
  let last = match(line, '\S\s*$') + 1
  return first > 0 && s:InSyntax(a:lnum, first, 'BlockComment\|LineComment')
        \ && s:InSyntax(a:lnum, last, 'BlockComment\|LineComment')
endfunction

" The previous line with code on it (skipping blank and comment-only lines).
function! s:PrevCode(lnum) abort
  let l = prevnonblank(a:lnum - 1)
  while l > 0 && (s:IsComment(l) || s:Code(l) =~# '^\s*$')
    let l = prevnonblank(l - 1)
  endwhile
  return l
endfunction

" Indentation of the nearest line above `lnum` whose code matches `pat`, at most `maxind` deep.
function! s:AlignWith(lnum, pat, maxind) abort
  let l = s:PrevCode(a:lnum)
  while l > 0
    if indent(l) <= a:maxind && s:Code(l) =~# a:pat
      return indent(l)
    endif
    let l = s:PrevCode(l)
  endwhile
  return -1
endfunction

function! GetDpIndent(lnum) abort
  let cur = getline(a:lnum)
  let first = match(cur, '\S') + 1
  " Inside a block comment: leave the line alone.
  if first > 0 && s:CommentDepth(a:lnum, first) > (cur =~# '^\s*/\*' ? 1 : 0)
    return -1
  endif
  let prev = s:PrevCode(a:lnum)
  if prev == 0
    return 0
  endif
  let pcode = s:Code(prev)
  let pind = indent(prev)
  let prev_continues = pcode =~# s:continues

  " A closing bracket lines up with the line of its opening bracket.
  let m = matchstr(cur, '^\s*\zs[)\]}]')
  if m !=# ''
    let open = {')': '(', ']': '\[', '}': '{'}[m]
    let close = {')': ')', ']': '\]', '}': '}'}[m]
    call cursor(a:lnum, first)
    let [l, c] = searchpairpos(open, '', close, 'bnW',
          \ 's:InSyntax(line("."), col("."), "BlockComment\\|LineComment\\|String")')
    return l > 0 ? indent(l) : pind
  endif

  if cur =~# '^\s*\%(type\|import\)\>'
    return 0
  endif
  " Keep an item that starts in column 1 there; a `let` after a finished line is an item too.
  if !prev_continues && ((indent(a:lnum) == 0 && cur =~# s:item_start) || cur =~# '^\s*let\>')
    return 0
  endif

  if cur =~# '^\s*|[|>]\@!'
    if pcode =~# '\<with$'
      " `match` first on its line (or just after an open paren): line up with it
      let col = matchend(pcode, '^\s*(\=\ze\<match\>')
      return col >= 0 ? col : pind + shiftwidth()
    elseif pcode =~# '[=!<>:]\@<!=$'
      return pind + shiftwidth()
    endif
    let i = s:AlignWith(a:lnum, '^\s*|[|>]\@!', pind)
    return i >= 0 ? i : pind
  endif
  if cur =~# '^\s*else\>'
    let i = s:AlignWith(a:lnum, '\<if\>', pind)
    return i >= 0 ? i : pind
  endif
  if cur =~# '^\s*in\>'
    let i = s:AlignWith(a:lnum, '\<let\>', pind)
    return i >= 0 ? i : pind
  endif

  if pcode =~# s:increase
    " the body of a match arm `| p ->` goes two levels in, as with ocamlformat
    return pind + shiftwidth() * (pcode =~# '^\s*|.*->$' ? 2 : 1)
  endif
  if cur =~# s:starts_infix && pcode !~# s:starts_infix
    " `let x = a` / `+ b`: one level in; in a broken expression, line up with its lines
    return pind + (pind == 0 || pcode =~# '^\s*let\>' ? shiftwidth() : 0)
  endif
  if pcode =~# s:starts_infix && cur !~# s:starts_infix && !prev_continues
    " the line after a continuation `+ b` of an item: back to that item's indentation
    let l = s:PrevCode(prev)
    while l > 0 && s:Code(l) =~# s:starts_infix
      let l = s:PrevCode(l)
    endwhile
    return l > 0 ? indent(l) : pind
  endif
  return pind
endfunction

let &cpo = s:cpo_save
unlet s:cpo_save
