" Vim filetype plugin for dp: comments, indentation width, :DpRun and :DpCheck.
if exists("b:did_ftplugin")
  finish
endif
let b:did_ftplugin = 1

let s:cpo_save = &cpo
set cpo&vim

setlocal comments=s1:/*,mb:*,ex:*/,:// commentstring=//\ %s
setlocal formatoptions-=t formatoptions+=croql
setlocal shiftwidth=2 softtabstop=2 expandtab
setlocal iskeyword=@,48-57,_,192-255,39
setlocal suffixesadd=.dp

" `dp run` / `dp check` on the current file; errors are shown in the terminal.
if !exists(":DpRun")
  command -buffer -nargs=* DpRun   update | execute '!' . get(g:, 'dp_program', 'dp') . ' run ' . shellescape(expand('%')) . ' ' . <q-args>
  command -buffer DpCheck update | execute '!' . get(g:, 'dp_program', 'dp') . ' check ' . shellescape(expand('%'))
endif

let b:undo_ftplugin = "setl com< cms< fo< sw< sts< et< isk< sua<"
      \ . " | silent! delcommand DpRun | silent! delcommand DpCheck"

let &cpo = s:cpo_save
unlet s:cpo_save
