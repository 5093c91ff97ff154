;;; dp-mode.el --- Major mode for the dp language  -*- lexical-binding: t; -*-

;; Version: 0.1.0
;; Package-Requires: ((emacs "27.1"))
;; Keywords: languages
;; SPDX-License-Identifier: MIT

;;; Commentary:

;; A major mode for dp, a statically typed functional differentiable-programming language
;; (files ending in .dp).  It provides:
;;
;; - syntax highlighting: keywords, built-in functions, constructors, type names and type
;;   variables in annotations and `type' declarations, numbers, strings with escapes,
;;   operators, `//' line comments and nested `/* /* */ */' block comments;
;; - comment commands (M-;) and a syntax table that knows about nested comments;
;; - indentation (TAB, `indent-region') that follows dp's layout rule: a line that starts in
;;   column 1 starts a new item, so such lines are only moved when the line above clearly
;;   continues;
;; - `dp-run-buffer' (C-c C-c) and `dp-check-buffer' (C-c C-v), which run `dp run' and
;;   `dp check' on the file in a compilation buffer;
;; - the language server `dp lsp' registered with Eglot (M-x eglot).
;;
;; Install: put this file on `load-path' and add (require 'dp-mode) to your init file, or
;; (autoload 'dp-mode "dp-mode" nil t) with (add-to-list 'auto-mode-alist '("\\.dp\\'" . dp-mode)).

;;; Code:

(require 'subr-x)

(defvar font-lock-beg)
(defvar font-lock-end)
(defvar compilation-error-regexp-alist)
(defvar compilation-error-regexp-alist-alist)
(defvar eglot-server-programs)

(defgroup dp nil
  "Major mode for the dp language."
  :group 'languages
  :prefix "dp-")

(defcustom dp-program "dp"
  "The dp executable, used by `dp-run-buffer' and `dp-check-buffer'."
  :type 'string)

(defcustom dp-indent-offset 2
  "Number of columns for each level of indentation in dp code."
  :type 'integer
  :safe #'integerp)

;;;; Word lists (they mirror src/syntax/keywords.rs; tests/editors.rs checks that they agree)

(defconst dp-keywords
  '("let" "rec" "and" "in" "fun" "if" "then" "else" "match" "with" "type" "import"
    "true" "false" "not" "ref")
  "The reserved words of dp (KEYWORDS in src/syntax/keywords.rs).")

(defconst dp-builtins
  '("reset" "shift" "grad" "value_and_grad" "custom_vjp" "custom_jvp" "checkpoint" "vmap" "jit" "jvp" "stop_gradient"
    "print" "println" "printf" "sprintf" "show" "read_file" "read_lines" "write_file" "args" "clock" "read_line" "getenv" "exit" "error" "catch"
    "float" "int" "string_of_int" "string_of_float" "int_of_string" "float_of_string"
    "string_length" "substring" "chars" "concat_strings" "split"
    "sin" "cos" "tan" "exp" "log" "sqrt" "tanh" "sigmoid" "erf" "gelu" "relu" "abs" "floor" "ceil"
    "pi" "infinity" "nan" "is_nan"
    "tensor" "zeros" "ones" "full" "arange" "randn" "uniform" "key" "split_key" "split_keys" "normal" "uniform_key" "randint" "permutation" "bernoulli" "load_npy"
    "save_npy" "read_csv" "load_csv" "save_params" "load_params" "load_npz" "save_npz" "plot_with" "shape" "reshape" "transpose" "concat" "slice" "row" "onehot"
    "sum" "mean" "max" "sum_axis" "mean_axis" "argmax" "softmax" "log_softmax"
    "logsumexp" "item" "to_list" "to_device" "dtype" "astype" "conv2d" "max_pool2d" "tree_add" "tree_sub"
    "tree_mul" "tree_div" "tree_scale" "tree_add_scalar" "tree_sqrt" "tree_clip" "tree_zeros" "tree_sum_squares"
    "progress_start" "progress_tick" "progress_finish" "plot"
    "less" "less_equal" "greater" "greater_equal" "equal" "not_equal" "logical_and" "logical_or" "logical_not" "where" "clip" "any" "all" "max_of" "min_of" "min" "argmin"
    "max_axis" "min_axis" "argmax_axis" "argmin_axis" "cumsum" "normalize" "softmax_axis" "log_softmax_axis" "var" "expand_dims" "squeeze" "stack" "broadcast_to" "ravel" "gather" "get"
    "einsum" "conv2d_with" "avg_pool2d")
  "The built-in values of dp (BUILTINS in src/syntax/keywords.rs).")

(defconst dp-type-names
  '("Int" "Float" "Bool" "String" "Unit" "Tensor" "Key" "List" "Ref")
  "The built-in type names of dp (TYPE_NAMES in src/syntax/keywords.rs).")

;;;; Faces

(defface dp-constructor-face
  '((t :inherit font-lock-constant-face))
  "Face for constructors such as `Some' and `Node'.")

(defface dp-type-variable-face
  '((t :inherit font-lock-type-face :slant italic))
  "Face for type variables in types, such as `a' in `List a'.")

(defface dp-operator-face
  (if (facep 'font-lock-operator-face)
      '((t :inherit font-lock-operator-face))
    '((t nil)))
  "Face for operators such as `+', `->' and `|>'.")

(defface dp-number-face
  (if (facep 'font-lock-number-face)
      '((t :inherit font-lock-number-face))
    '((t :inherit font-lock-constant-face)))
  "Face for Int and Float literals.")

(defface dp-escape-face
  (if (facep 'font-lock-escape-face)
      '((t :inherit font-lock-escape-face))
    '((t :inherit font-lock-regexp-grouping-backslash)))
  "Face for escape sequences in strings, such as \\n.")

;;;; Syntax table

(defvar dp-mode-syntax-table
  (let ((st (make-syntax-table)))
    ;; `//' comments (style b) and nestable `/* */' comments (style a, flag n).
    (modify-syntax-entry ?/ ". 124b" st)
    (modify-syntax-entry ?* ". 23n" st)
    (modify-syntax-entry ?\n "> b" st)
    (modify-syntax-entry ?\" "\"" st)
    (modify-syntax-entry ?\\ "\\" st)
    ;; Identifiers may contain `_', digits and primes: x1, f', grad'.
    (modify-syntax-entry ?_ "_" st)
    (modify-syntax-entry ?' "_" st)
    (dolist (c '(?+ ?- ?= ?< ?> ?| ?& ?% ?@ ?! ?: ?\; ?, ?. ?# ?$ ?~ ?^ ?? ?`))
      (modify-syntax-entry c "." st))
    st)
  "Syntax table for `dp-mode'.")

;;;; Font lock

(defconst dp--ident "[a-z_][A-Za-z0-9_']*")
(defconst dp--cap-ident "[A-Z][A-Za-z0-9_']*")

(defun dp--in-string-or-comment-p (&optional pos)
  "Non-nil when POS (default point) is inside a string or a comment."
  (save-excursion (nth 8 (syntax-ppss pos))))

(defun dp--item-start-p ()
  "Non-nil when the line at point starts a top-level item (a token in column 1)."
  (save-excursion
    (beginning-of-line)
    (and (looking-at "[A-Za-z0-9_\"([{!]")
         (not (looking-at "\\(?:in\\|and\\|then\\|else\\|with\\)\\_>"))
         (not (dp--in-string-or-comment-p)))))

(defun dp--item-end ()
  "The start of the next line that starts an item, or `point-max'."
  (save-excursion
    (forward-line 1)
    (while (and (not (eobp)) (not (dp--item-start-p)))
      (forward-line 1))
    (point)))

(defun dp--annotation-end ()
  "The end of the type that starts at point.
That is the first closing bracket, `=', `,', `;' or end of line that is not
inside brackets of the type itself."
  (save-excursion
    (let ((depth 0) (end nil))
      (while (not end)
        (cond
         ((eobp) (setq end (point)))
         ((and (= depth 0) (eolp)) (setq end (point)))
         ((looking-at "//\\|/\\*") (setq end (point)))
         (t
          (let ((c (char-after)))
            (cond
             ((memq c '(?\( ?\[ ?{)) (setq depth (1+ depth)))
             ((memq c '(?\) ?\] ?}))
              (if (= depth 0) (setq end (point)) (setq depth (1- depth))))
             ((and (= depth 0) (memq c '(?= ?, ?\;))) (setq end (point)))))
          (unless end (forward-char 1)))))
      end)))

(defun dp--match-annotation (limit)
  "Find the next lone `:' (a type annotation) before LIMIT.
Colons in strings and comments do not count."
  (let (found)
    (while (and (not found) (search-forward ":" limit t))
      (let ((b (1- (point))))
        (unless (or (eq (char-before b) ?:)
                    (memq (char-after) '(?: ?=))
                    (dp--in-string-or-comment-p b))
          (set-match-data (list b (point)))
          (setq found t))))
    found))

(defun dp--match-escape (limit)
  "Find the next backslash escape inside a string before LIMIT.
Group 1 is a valid escape, group 2 an unknown one."
  (let (found)
    (while (and (not found)
                (re-search-forward "\\(\\\\[ntr\\\\\"0]\\)\\|\\(\\\\.\\)" limit t))
      (when (save-excursion (nth 3 (syntax-ppss (match-beginning 0))))
        (setq found t)))
    found))

(defconst dp--type-words
  (concat "\\_<\\(?:"
          "\\(" dp--ident "\\)[ \t]*:[^:=]"      ; 1: a record field name
          "\\|\\(" (regexp-opt dp-type-names) "\\)\\_>" ; 2: built-in type
          "\\|\\(" dp--cap-ident "\\)"           ; 3: type name
          "\\|\\(" dp--ident "\\)"               ; 4: type variable
          "\\)\\|\\(->\\||\\)")                  ; 5: operators in types
  "Words inside a type.")

(defconst dp--type-decl-words
  (concat "\\(?:[=|][ \t]*\\(" dp--cap-ident "\\)\\)\\|" ; 1: a constructor after = or |
          "\\_<\\(?:"
          "\\(" dp--ident "\\)[ \t]*:[^:=]"                ; 2: a record field name
          "\\|\\(" (regexp-opt dp-type-names) "\\)\\_>"     ; 3: built-in type
          ;; (numbered explicitly: 6 comes first so that `and' is not read as a type variable)
          "\\|\\(?6:and\\)\\_>"                          ; 6: `and' before a group's next type
          "\\|\\(?4:" dp--cap-ident "\\)"                  ; 4: type name
          "\\|\\(?5:" dp--ident "\\)"                      ; 5: type variable
          "\\)")
  "Words inside a `type' declaration.")

(defconst dp--operators
  "|>\\|||\\|&&\\|::\\|:=\\|\\+\\+\\|\\*\\*\\|->\\|==\\|!=\\|<=\\|>=\\|[-+*/%@<>!|=]")

(defvar dp-font-lock-keywords
  `(;; `type Name params = Con T | ...': until the next item.
    (,(concat "^\\(type\\)[ \t]+\\(" dp--cap-ident "\\)")
     (1 font-lock-keyword-face)
     (2 font-lock-type-face)
     (,dp--type-decl-words
      (dp--item-end) nil
      (1 'dp-constructor-face nil t)
      (3 font-lock-type-face nil t)
      (4 font-lock-type-face nil t)
      (5 'dp-type-variable-face nil t)
      (6 font-lock-keyword-face nil t)))
    ;; `(x : T)', `(e : T)', `let f x : T =': the type after a lone colon.
    (dp--match-annotation
     (0 'dp-operator-face)
     (,dp--type-words
      (dp--annotation-end) nil
      (2 font-lock-type-face nil t)
      (3 font-lock-type-face nil t)
      (4 'dp-type-variable-face nil t)
      (5 'dp-operator-face nil t)))
    ;; The name bound by `let', `let rec' and `and'.
    (,(concat "\\_<\\(?:let\\(?:[ \t]+rec\\)?\\|and\\)[ \t]+\\([a-z][A-Za-z0-9_']*\\|_[A-Za-z0-9_']+\\)\\_>")
     (1 (unless (member (match-string 1) dp-keywords) font-lock-function-name-face)))
    (,(concat "\\_<import[ \t]+\\(" dp--ident "\\)")
     (1 font-lock-constant-face))
    (,(regexp-opt '("true" "false") 'symbols) . font-lock-constant-face)
    (,(regexp-opt (remove "true" (remove "false" dp-keywords)) 'symbols) . font-lock-keyword-face)
    ;; not after a dot: nn.log is a module member
    (,(concat "\\(?:^\\|[^.]\\)\\(" (regexp-opt dp-builtins 'symbols) "\\)")
     (1 font-lock-builtin-face))
    ("([ \t]*)\\|\\[[ \t]*\\]" . font-lock-constant-face)
    (,(concat "\\_<" dp--cap-ident) . 'dp-constructor-face)
    ("\\_<[0-9][0-9_]*\\(?:\\.[0-9_]*\\(?:[eE][-+]?[0-9]+\\)?\\|[eE][-+]?[0-9]+\\)" . 'dp-number-face)
    ("\\_<[0-9][0-9_]*\\_>" . 'dp-number-face)
    (dp--match-escape
     (1 'dp-escape-face prepend t)
     (2 font-lock-warning-face prepend t))
    (,dp--operators . 'dp-operator-face)
    ("[#$`?\\~^]\\|\\_<'" . font-lock-warning-face))
  "Highlighting for `dp-mode'.")

(defun dp--font-lock-extend-region ()
  "Start refontification at a `type' declaration that covers `font-lock-beg'."
  (save-excursion
    (goto-char font-lock-beg)
    (beginning-of-line)
    (while (and (not (bobp)) (not (dp--item-start-p)))
      (forward-line -1))
    (when (and (looking-at "type\\_>") (< (point) font-lock-beg))
      (setq font-lock-beg (point))
      t)))

;;;; Indentation

(defconst dp--opens-re
  "\\(?:\\(?:^\\|[^=!<>:]\\)=\\|->\\|\\_<then\\|\\_<else\\|\\_<with\\|[([{]\\)"
  "Line endings after which the next line goes one level in.")

(defconst dp--continues-re
  (concat "\\(?:" dp--opens-re "\\|\\_<in\\|[;,]\\|[-+*/%@<>&|:=]\\)[ \t]*\\'")
  "Line endings after which the next line cannot start an item.")

(defconst dp--starts-infix-re
  "\\`[ \t]*\\(?:|>\\|||\\|&&\\|::\\|\\+\\+\\|\\*\\*\\|==\\|!=\\|<=\\|>=\\|:=\\|/[^/*]\\|[-+*%@<>]\\)")

(defun dp--line-code ()
  "The code of the current line, without comments and with strings emptied."
  (let ((line (buffer-substring-no-properties (line-beginning-position) (line-end-position))))
    (setq line (replace-regexp-in-string "\"\\(?:[^\"\\\\]\\|\\\\.\\)*\"" "\"\"" line t t))
    (setq line (replace-regexp-in-string "/\\*.*?\\*/" " " line t t))
    (setq line (replace-regexp-in-string "//.*\\'" "" line t t))
    (string-trim-right line)))

(defun dp--comment-line-p ()
  "Non-nil when the current line holds nothing but comments."
  (save-excursion
    (back-to-indentation)
    (and (or (looking-at "//\\|/\\*") (nth 4 (syntax-ppss)))
         (progn (end-of-line)
                (skip-chars-backward " \t")
                (nth 4 (syntax-ppss (max (line-beginning-position) (1- (point)))))))))

(defun dp--previous-code-line ()
  "Move to the previous line with code on it; return nil at the top of the buffer."
  (let (found)
    (while (and (not found) (= 0 (forward-line -1)))
      (unless (or (looking-at "[ \t]*$") (dp--comment-line-p)
                  (string-empty-p (dp--line-code)))
        (setq found t)))
    found))

(defun dp--align-with (regexp maxind)
  "Indentation of the nearest code line above matching REGEXP, at most MAXIND deep."
  (save-excursion
    (let (result)
      (while (and (not result) (dp--previous-code-line))
        (when (and (<= (current-indentation) maxind)
                   (string-match-p regexp (dp--line-code)))
          (setq result (current-indentation))))
      result)))

(defun dp--calculate-indentation ()
  "The column the current line should be indented to, or nil to leave it alone."
  (save-excursion
    (back-to-indentation)
    (let* ((ppss (syntax-ppss))
           (cur (buffer-substring-no-properties (point) (line-end-position)))
           (cur-indent (current-indentation)))
      (cond
       ;; Inside a block comment (or a string): leave the line alone.
       ((nth 8 ppss) nil)
       ;; A closing bracket lines up with the line of its opening bracket.
       ((and (string-match-p "\\`[])}]" cur) (nth 1 ppss))
        (goto-char (nth 1 ppss))
        (current-indentation))
       ((string-match-p "\\`\\(?:type\\|import\\)\\_>" cur) 0)
       (t
        (let* ((has-prev (save-excursion (dp--previous-code-line)))
               (pcode (if has-prev (save-excursion (dp--previous-code-line) (dp--line-code)) ""))
               (pind (if has-prev (save-excursion (dp--previous-code-line) (current-indentation)) 0))
               (prev-continues (string-match-p dp--continues-re pcode)))
          (cond
           ((not has-prev) 0)
           ;; Keep an item that starts in column 1 there; a `let' after a finished line is an item.
           ((and (not prev-continues)
                 (or (and (= cur-indent 0)
                          (string-match-p "\\`[A-Za-z0-9_\"([{!/]" cur)
                          (not (string-match-p "\\`\\(?:in\\|and\\|then\\|else\\|with\\)\\_>" cur)))
                     (string-match-p "\\`let\\_>" cur)))
            0)
           ;; `| pattern ->'
           ((string-match-p "\\`|\\(?:[^|>]\\|\\'\\)" cur)
            (cond
             ((string-match-p "\\_<with\\'" pcode)
              (if (string-match "\\`[ \t]*(?\\(\\)match\\_>" pcode)
                  (match-beginning 1)
                (+ pind dp-indent-offset)))
             ((string-match-p "\\(?:^\\|[^=!<>:]\\)=\\'" pcode) (+ pind dp-indent-offset))
             (t (or (dp--align-with "\\`[ \t]*|\\(?:[^|>]\\|\\'\\)" pind) pind))))
           ((string-match-p "\\`else\\_>" cur) (or (dp--align-with "\\_<if\\_>" pind) pind))
           ((string-match-p "\\`in\\_>" cur) (or (dp--align-with "\\_<let\\_>" pind) pind))
           ((string-match-p (concat dp--opens-re "[ \t]*\\'") pcode)
            ;; the body of a match arm `| p ->' goes two levels in, as with ocamlformat
            (+ pind (* dp-indent-offset (if (string-match-p "\\`[ \t]*|.*->\\'" pcode) 2 1))))
           ((and (string-match-p dp--starts-infix-re cur)
                 (not (string-match-p dp--starts-infix-re pcode)))
            (+ pind (if (or (= pind 0) (string-match-p "\\`[ \t]*let\\_>" pcode)) dp-indent-offset 0)))
           ((and (string-match-p dp--starts-infix-re pcode)
                 (not (string-match-p dp--starts-infix-re cur))
                 (not prev-continues))
            ;; after the continuation lines `+ b' of an item: back to the item's indentation
            (save-excursion
              (dp--previous-code-line)
              (while (and (string-match-p dp--starts-infix-re (dp--line-code))
                          (dp--previous-code-line)))
              (current-indentation)))
           (t pind))))))))

(defun dp-indent-line ()
  "Indent the current line as dp code."
  (interactive)
  (let ((col (dp--calculate-indentation)))
    (when col
      (if (<= (current-column) (current-indentation))
          (indent-line-to col)
        (save-excursion (indent-line-to col))))))

;;;; Running dp

(defun dp--file-command (subcommand)
  "A shell command running `dp SUBCOMMAND' on the buffer's file (saved first)."
  (unless buffer-file-name
    (user-error "This buffer is not visiting a file"))
  (when (buffer-modified-p)
    (save-buffer))
  (concat (shell-quote-argument dp-program) " " subcommand " "
          (shell-quote-argument (expand-file-name buffer-file-name))))

(defun dp-run-buffer ()
  "Run the current file with `dp run' in a compilation buffer."
  (interactive)
  (compile (dp--file-command "run")))

(defun dp-check-buffer ()
  "Type-check the current file with `dp check' in a compilation buffer."
  (interactive)
  (compile (dp--file-command "check")))

(with-eval-after-load 'compile
  ;; dp reports errors as ariadne does: "╭─[ path/file.dp:LINE:COLUMN ]".
  (add-to-list 'compilation-error-regexp-alist-alist
               '(dp "\\[ ?\\([^][ \t\n:]+\\.dp\\):\\([0-9]+\\):\\([0-9]+\\) ?\\]" 1 2 3))
  (add-to-list 'compilation-error-regexp-alist 'dp))

;;;; The language server

(with-eval-after-load 'eglot
  (add-to-list 'eglot-server-programs '(dp-mode "dp" "lsp")))

;;;; The mode

(defvar dp-mode-map
  (let ((map (make-sparse-keymap)))
    (define-key map (kbd "C-c C-c") #'dp-run-buffer)
    (define-key map (kbd "C-c C-v") #'dp-check-buffer)
    map)
  "Keymap for `dp-mode'.")

;;;###autoload
(define-derived-mode dp-mode prog-mode "dp"
  "Major mode for editing dp code.

\\{dp-mode-map}"
  :syntax-table dp-mode-syntax-table
  (setq-local comment-start "// ")
  (setq-local comment-end "")
  (setq-local comment-start-skip "\\(?://+\\|/\\*+\\)[ \t]*")
  (setq-local comment-end-skip "[ \t]*\\(?:\n\\|\\*+/\\)")
  (setq-local comment-use-syntax t)
  (setq-local font-lock-defaults '(dp-font-lock-keywords nil nil))
  (setq-local font-lock-multiline t)
  (add-hook 'font-lock-extend-region-functions #'dp--font-lock-extend-region nil t)
  (setq-local indent-line-function #'dp-indent-line)
  (setq-local indent-tabs-mode nil)
  (setq-local tab-width dp-indent-offset)
  (setq-local electric-indent-chars (append "|)]}" electric-indent-chars))
  (setq-local imenu-generic-expression
              `(("Types" ,(concat "^type[ \t]+\\(" dp--cap-ident "\\)") 1)
                (nil ,(concat "^\\(?:let\\(?:[ \t]+rec\\)?\\|and\\)[ \t]+\\([a-z][A-Za-z0-9_']*\\)") 1))))

;;;###autoload
(add-to-list 'auto-mode-alist '("\\.dp\\'" . dp-mode))

(provide 'dp-mode)

;;; dp-mode.el ends here
