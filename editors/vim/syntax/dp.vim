" Vim syntax file
" Language:    dp (a statically typed functional differentiable-programming language)
" Filenames:   *.dp
" Works in Vim 8+ and Neovim. The word lists mirror src/syntax/keywords.rs (KEYWORDS,
" BUILTINS, TYPE_NAMES); tests/editors.rs checks that they agree.

if exists("b:current_syntax")
  finish
endif

let s:cpo_save = &cpo
set cpo&vim

syn case match
" Identifiers may contain digits and primes: x1, f', grad'.
syn iskeyword @,48-57,_,192-255,39

" ---- keywords (KEYWORDS) ------------------------------------------------------------------
syn keyword dpConditional     if then else match with
syn keyword dpImport          import nextgroup=dpModuleName skipwhite
syn keyword dpKeyword         let rec and in fun type ref
syn keyword dpOperatorKeyword not
syn keyword dpBoolean         true false

" ---- built-in values (BUILTINS) -----------------------------------------------------------
syn keyword dpBuiltin reset shift grad value_and_grad custom_vjp custom_jvp checkpoint vmap jit jvp stop_gradient
syn keyword dpBuiltin print println printf sprintf show read_file read_lines write_file args clock read_line getenv exit error catch
syn keyword dpBuiltin float int string_of_int string_of_float int_of_string float_of_string
syn keyword dpBuiltin string_length substring chars concat_strings split
syn keyword dpBuiltin sin cos tan exp log sqrt tanh sigmoid erf gelu relu abs floor ceil
syn keyword dpBuiltin pi infinity nan is_nan
syn keyword dpBuiltin tensor zeros ones full arange randn uniform key split_key split_keys normal uniform_key randint permutation bernoulli load_npy save_npy read_csv load_csv save_params load_params load_npz save_npz plot_with shape
syn keyword dpBuiltin reshape transpose concat slice row onehot sum mean max sum_axis
syn keyword dpBuiltin mean_axis argmax softmax log_softmax logsumexp item to_list to_device dtype astype conv2d max_pool2d
syn keyword dpBuiltin less less_equal greater greater_equal equal not_equal logical_and logical_or logical_not where clip any all max_of min_of min argmin
syn keyword dpBuiltin max_axis min_axis argmax_axis argmin_axis cumsum normalize softmax_axis log_softmax_axis var expand_dims squeeze stack broadcast_to ravel gather get
syn keyword dpBuiltin einsum conv2d_with avg_pool2d
syn keyword dpBuiltin tree_add tree_sub tree_mul tree_div tree_scale tree_add_scalar tree_sqrt tree_clip tree_zeros tree_sum_squares
syn keyword dpBuiltin progress_start progress_tick progress_finish plot

" ---- built-in type names (TYPE_NAMES), only inside types -----------------------------------
syn keyword dpBuiltinType contained Int Float Bool String Unit Tensor Key List Ref

" ---- operators and punctuation --------------------------------------------------------------
syn match dpOperator "|>\|||\|&&\|::\|:=\|++\|\*\*\|->\|==\|!=\|<=\|>=\|[-+*/%@<>!|=]"
syn match dpDelimiter "[,;]"
syn match dpUnit "(\s*)"
syn match dpEmptyList "\[\s*\]"
syn match dpError "[#$`?\\~^]\|&\@<!&&\@!\|\k\@<!'"

" ---- names ----------------------------------------------------------------------------------
syn match dpConstructor "\<\u\k*"
" a member after a dot is never a builtin or keyword: nn.log, r.w
syn match dpMember "\.\s*\l\k*" contains=dpAccessor
syn match dpAccessor "\." contained
" the name bound by let / let rec / and
syn match dpFunction "\%(\<\%(let\%(\s\+rec\)\=\|and\)\s\+\)\@<=\%(rec\>\)\@![a-z_]\k*"
syn match dpModuleName "\l\k*" contained

" ---- numbers --------------------------------------------------------------------------------
syn match dpInteger "\<\d[0-9_]*\>"
" defined after dpInteger so that it wins at the same position: 3.14 2. 1e-3 6.02e23
syn match dpFloat "\<\d[0-9_]*\%(\.[0-9_]*\%([eE][-+]\=\d\+\)\=\|[eE][-+]\=\d\+\)\%(\k\|\.\)\@!"

" ---- types ----------------------------------------------------------------------------------
syn cluster dpTypeExpr contains=dpBuiltinType,dpTypeName,dpTypeVar,dpTypeArrow,dpTypeParen,dpTypeRecord,dpLineComment,dpBlockComment,dpDelimiter
syn match dpTypeName "\<\u\k*" contained
syn match dpTypeVar "\<[a-z_]\k*" contained
syn match dpTypeArrow "->" contained
syn region dpTypeParen matchgroup=dpDelimiter start="(" end=")" contained contains=@dpTypeExpr
syn region dpTypeRecord matchgroup=dpDelimiter start="{" end="}" contained contains=dpRecordField,dpRowBar,@dpTypeExpr
syn match dpRecordField "\<[a-z_]\k*\ze\s*:[:=]\@!" contained nextgroup=dpTypeColon skipwhite
syn match dpRowBar "|" contained

" An annotation `(x : T)`, `(e : T)`, `let f x : T =`: from a lone `:` up to a closing bracket,
" `=`, `,`, `;` or the end of the line.
syn region dpTypeAnnot matchgroup=dpTypeColon start=":\@<!:[:=]\@!" end="\%([)=,;\]}]\)\@=" end="$" contains=@dpTypeExpr
syn match dpTypeColon ":" contained

" A declaration `type Name params = Con T | ...` lasts until a line that starts a new item in
" column 1 (not a comment, closing bracket, `|` or other operator); `and Name = ...` continues
" it with the next type of a group (hence the keywords inside).
syn region dpTypeDecl matchgroup=dpTypeName start="\%(\<type\s\+\)\@<=\u\k*" end="^\%(\%(in\|and\|then\|else\|with\)\>\)\@![A-Za-z0-9_"(\[{!]\@=" contains=@dpTypeExpr,dpTypeDeclOp,dpConstructorDecl,dpKeyword
syn match dpTypeDeclOp "[=|]" contained
syn match dpConstructorDecl "\%([=|]\s*\)\@<=\u\k*" contained

" ---- strings and comments (last: they win over operators at the same position) -------------
syn match dpEscape +\\[ntr\\"0]+ contained
syn match dpInvalidEscape +\\[^ntr\\"0]+ contained
syn region dpString start=+"+ skip=+\\\\\|\\"+ end=+"+ contains=dpEscape,dpInvalidEscape,@Spell

syn keyword dpTodo contained TODO FIXME XXX NOTE
syn match dpLineComment "//.*$" contains=dpTodo,@Spell
" Block comments nest: the region contains itself.
syn region dpBlockComment start="/\*" end="\*/" contains=dpBlockComment,dpTodo,@Spell fold

syn sync minlines=100

hi def link dpConditional     Conditional
hi def link dpImport          Include
hi def link dpKeyword         Keyword
hi def link dpOperatorKeyword Operator
hi def link dpBoolean         Boolean
hi def link dpBuiltin         Function
hi def link dpBuiltinType     Type
hi def link dpOperator        Operator
hi def link dpTypeArrow       Operator
hi def link dpTypeColon       Operator
hi def link dpTypeDeclOp      Operator
hi def link dpRowBar          Operator
hi def link dpDelimiter       Delimiter
hi def link dpUnit            Constant
hi def link dpEmptyList       Constant
hi def link dpError           Error
hi def link dpConstructor     Constant
hi def link dpConstructorDecl Constant
hi def link dpFunction        Function
hi def link dpModuleName      Identifier
hi def link dpRecordField     Identifier
hi def link dpInteger         Number
hi def link dpFloat           Float
hi def link dpTypeName        Type
hi def link dpTypeVar         Identifier
hi def link dpEscape          SpecialChar
hi def link dpInvalidEscape   Error
hi def link dpString          String
hi def link dpTodo            Todo
hi def link dpLineComment     Comment
hi def link dpBlockComment    Comment

let b:current_syntax = "dp"

let &cpo = s:cpo_save
unlet s:cpo_save
