" dp source files
autocmd BufRead,BufNewFile *.dp setfiletype dp
