;;; dp-mode-tests.el --- ERT tests for dp-mode  -*- lexical-binding: t; -*-

;;; Commentary:

;; Run from the repository root:
;;   emacs --batch -Q -l editors/emacs/dp-mode.el -l editors/emacs/dp-mode-tests.el \
;;         -f ert-run-tests-batch-and-exit
;;
;; Besides small tests of faces, comments, indentation and commands, this checks the
;; assertions of editors/tests/fixture.dp (written in TextMate scopes, shared with the
;; VS Code and Vim tests; see `dp-test-scope-faces') and re-indents editors/tests/indent.dp.

;;; Code:

(require 'ert)
(require 'cl-lib)
(require 'dp-mode)

(defconst dp-test-dir
  (expand-file-name "../tests/" (file-name-directory (or load-file-name buffer-file-name)))
  "The folder of the shared editor fixtures.")

(defmacro dp-test-with-buffer (text &rest body)
  "Run BODY in a `dp-mode' buffer holding TEXT, fontified, with point at the start."
  (declare (indent 1))
  `(with-temp-buffer
     (insert ,text)
     (dp-mode)
     (font-lock-ensure)
     (goto-char (point-min))
     ,@body))

(defun dp-test-faces-at (pos)
  "The faces at POS, as a list."
  (let ((f (get-text-property pos 'face)))
    (if (listp f) f (list f))))

(defun dp-test-face-of (text needle &optional nth)
  "The faces at the start of the NTH (default 0) occurrence of NEEDLE in TEXT."
  (dp-test-with-buffer text
    (dotimes (_ (1+ (or nth 0)))
      (search-forward needle))
    (dp-test-faces-at (match-beginning 0))))

;;;; Faces

(ert-deftest dp-mode-auto-mode ()
  (should (eq (assoc-default "dir/quickstart.dp" auto-mode-alist #'string-match) 'dp-mode)))

(ert-deftest dp-mode-faces-basic ()
  (let ((src "let rec f x = if x then grad g 2.0 else Some 42 // done\n"))
    (should (memq 'font-lock-keyword-face (dp-test-face-of src "let")))
    (should (memq 'font-lock-keyword-face (dp-test-face-of src "rec")))
    (should (memq 'font-lock-function-name-face (dp-test-face-of src "f x")))
    (should (memq 'font-lock-keyword-face (dp-test-face-of src "if")))
    (should (memq 'font-lock-builtin-face (dp-test-face-of src "grad")))
    (should (memq 'dp-number-face (dp-test-face-of src "2.0")))
    (should (memq 'dp-constructor-face (dp-test-face-of src "Some")))
    (should (memq 'dp-number-face (dp-test-face-of src "42")))
    (should (memq 'font-lock-comment-face (dp-test-face-of src "done")))))

(ert-deftest dp-mode-faces-strings ()
  (let ((src "let s = \"a\\tb \\q let\" ++ \"x\"\n"))
    (should (memq 'font-lock-string-face (dp-test-face-of src "a\\t")))
    (should (memq 'dp-escape-face (dp-test-face-of src "\\t")))
    (should (memq 'font-lock-string-face (dp-test-face-of src "\\t")))
    (should (memq 'font-lock-warning-face (dp-test-face-of src "\\q")))
    (should-not (memq 'font-lock-keyword-face (dp-test-face-of src "let" 1)))
    (should (memq 'dp-operator-face (dp-test-face-of src "++")))))

(ert-deftest dp-mode-faces-types ()
  (let ((src "type Option a = None | Some a\nlet f (x : List b) (r : { w : Tensor | r }) = Some x\n"))
    (should (memq 'font-lock-type-face (dp-test-face-of src "Option")))
    (should (memq 'dp-type-variable-face (dp-test-face-of src "a =")))
    (should (memq 'dp-constructor-face (dp-test-face-of src "None")))
    (should (memq 'dp-constructor-face (dp-test-face-of src "Some")))
    (should (memq 'font-lock-type-face (dp-test-face-of src "List")))
    (should (memq 'dp-type-variable-face (dp-test-face-of src "b)")))
    (should (memq 'font-lock-type-face (dp-test-face-of src "Tensor")))
    (should-not (memq 'dp-type-variable-face (dp-test-face-of src "w :")))
    (should (memq 'dp-constructor-face (dp-test-face-of src "Some" 1)))))

(ert-deftest dp-mode-faces-not-inside-identifiers ()
  (let ((src "let letter = in_range + grad' + nn.log\n"))
    (should-not (memq 'font-lock-keyword-face (dp-test-face-of src "in_range")))
    (should-not (memq 'font-lock-builtin-face (dp-test-face-of src "grad'")))
    (should-not (memq 'font-lock-builtin-face (dp-test-face-of src "log")))))

;;;; Comments

(ert-deftest dp-mode-nested-block-comments ()
  (dp-test-with-buffer "/* a /* b */ c */ let x = 1\n"
    (search-forward " c")
    (should (nth 4 (syntax-ppss)))
    (search-forward "let")
    (should-not (nth 4 (syntax-ppss)))
    (should (memq 'font-lock-comment-face (dp-test-face-of "/* a /* b */ c */ let\n" "c ")))
    (should (memq 'font-lock-keyword-face (dp-test-face-of "/* a /* b */ c */ let\n" "let")))))

(ert-deftest dp-mode-nested-block-comments-multiline ()
  (dp-test-with-buffer "/*\n  /* inner\n  */\n  still outer\n*/\nlet x = 1\n"
    (search-forward "still")
    (should (nth 4 (syntax-ppss)))
    (should (memq 'font-lock-comment-face (dp-test-faces-at (point))))
    (search-forward "let")
    (should-not (nth 4 (syntax-ppss)))))

(ert-deftest dp-mode-line-comments ()
  (dp-test-with-buffer "let x = 1 // note /* not a block\nlet y = 2\n"
    (search-forward "note")
    (should (nth 4 (syntax-ppss)))
    (search-forward "let y")
    (should-not (nth 4 (syntax-ppss))))
  (with-temp-buffer
    (dp-mode)
    (insert "let x = 1")
    (comment-region (point-min) (point-max))
    (should (equal (buffer-string) "// let x = 1"))
    (uncomment-region (point-min) (point-max))
    (should (equal (buffer-string) "let x = 1"))))

;;;; Indentation

(defun dp-test-indent (text)
  "TEXT re-indented with `indent-region'."
  (with-temp-buffer
    (insert text)
    (dp-mode)
    (indent-region (point-min) (point-max))
    (buffer-string)))

(ert-deftest dp-mode-indent-snippet ()
  (should (equal (dp-test-indent "let f x =\nmatch x with\n| 0 -> 1\n| n ->\nlet y = n * 2 in\ny\n")
                 "let f x =\n  match x with\n  | 0 -> 1\n  | n ->\n      let y = n * 2 in\n      y\n"))
  (should (equal (dp-test-indent "let classify n =\nif n < 0 then\n\"neg\"\nelse\n\"pos\"\nprintln 1\n")
                 "let classify n =\n  if n < 0 then\n    \"neg\"\n  else\n    \"pos\"\nprintln 1\n"))
  (should (equal (dp-test-indent "let xs = [\n1,\n2\n]\n") "let xs = [\n  1,\n  2\n]\n")))

(ert-deftest dp-mode-indent-new-line ()
  (with-temp-buffer
    (dp-mode)
    (insert "let f x =")
    (newline-and-indent)
    (should (= (current-column) 2))
    (insert "x + 1")
    (newline-and-indent)
    (insert "let g = 2")
    (indent-according-to-mode)
    (should (= (current-indentation) 0))))

(ert-deftest dp-mode-indent-fixture ()
  "Scramble the indented lines of indent.dp, re-indent, and get the file back."
  (let* ((file (expand-file-name "indent.dp" dp-test-dir))
         (expected (with-temp-buffer (insert-file-contents file) (buffer-string))))
    (with-temp-buffer
      (insert expected)
      (dp-mode)
      (goto-char (point-min))
      (while (not (eobp))
        (back-to-indentation)
        (when (and (> (current-column) 0) (not (nth 4 (syntax-ppss))))
          (indent-line-to 5))
        (forward-line 1))
      (indent-region (point-min) (point-max))
      (let ((got (split-string (buffer-string) "\n"))
            (want (split-string expected "\n"))
            (line 0)
            (bad nil))
        (cl-mapc (lambda (g w)
                   (setq line (1+ line))
                   (unless (equal g w) (push (format "indent.dp:%d: want %S, got %S" line w g) bad)))
                 got want)
        (should (equal (nreverse bad) nil))))))

;;;; Commands and registration

(ert-deftest dp-mode-run-buffer ()
  (let* ((dir (make-temp-file "dp-mode-test" t))
         (file (expand-file-name "hello world.dp" dir))
         (commands nil))
    (unwind-protect
        (with-current-buffer (find-file-noselect file)
          (insert "println \"hi\"\n")
          (cl-letf (((symbol-function 'compile) (lambda (cmd &rest _) (push cmd commands))))
            (dp-run-buffer)
            (dp-check-buffer))
          (should-not (buffer-modified-p))
          (should (equal (nreverse commands)
                         (list (concat "dp run " (shell-quote-argument file))
                               (concat "dp check " (shell-quote-argument file)))))
          (kill-buffer))
      (delete-directory dir t))))

(ert-deftest dp-mode-eglot-registration ()
  (unless (require 'eglot nil t)
    (ert-skip "eglot is not installed"))
  (should (member '(dp-mode "dp" "lsp") eglot-server-programs)))

(ert-deftest dp-mode-compilation-error-regexp ()
  (require 'compile)
  (let ((re (nth 1 (assq 'dp compilation-error-regexp-alist-alist)))
        (line "   ╭─[ examples/quickstart.dp:12:5 ]"))
    (should (string-match re line))
    (should (equal (match-string 1 line) "examples/quickstart.dp"))
    (should (equal (match-string 2 line) "12"))
    (should (equal (match-string 3 line) "5"))))

(ert-deftest dp-mode-word-lists ()
  (should (= (length dp-keywords) 16))
  (should (member "grad" dp-builtins))
  (should (member "Tensor" dp-type-names)))

;;;; The shared fixture

(defconst dp-test-scope-faces
  '(("comment" font-lock-comment-face font-lock-comment-delimiter-face)
    ("string" font-lock-string-face)
    ("constant.character.escape" dp-escape-face)
    ("invalid" font-lock-warning-face)
    ("constant.numeric" dp-number-face)
    ("keyword.control" font-lock-keyword-face)
    ("keyword.other" font-lock-keyword-face)
    ("keyword.operator" dp-operator-face)
    ("keyword.operator.word" font-lock-keyword-face)
    ("constant.language" font-lock-constant-face)
    ("support.function.builtin" font-lock-builtin-face)
    ("support.type" font-lock-type-face)
    ("entity.name.type" font-lock-type-face)
    ("entity.name.type.parameter" dp-type-variable-face)
    ("constant.other.constructor" dp-constructor-face)
    ("entity.name.function" font-lock-function-name-face)
    ("entity.name.namespace" font-lock-constant-face))
  "TextMate scope (a dot-separated prefix) -> the faces dp-mode gives it.
Scopes with no entry (punctuation, parameters, members) are not checked.")

(defun dp-test--prefix-p (prefix scope)
  (or (string= prefix scope) (string-prefix-p (concat prefix ".") scope)))

(defun dp-test--positive-faces (scope)
  "The faces of the longest mapped prefix of SCOPE."
  (let (best)
    (dolist (entry dp-test-scope-faces)
      (when (and (dp-test--prefix-p (car entry) scope)
                 (> (length (car entry)) (length (car best))))
        (setq best entry)))
    (cdr best)))

(defun dp-test--negative-faces (scope)
  "The faces of every mapped scope inside or around SCOPE."
  (let (faces)
    (dolist (entry dp-test-scope-faces)
      (when (or (dp-test--prefix-p (car entry) scope) (dp-test--prefix-p scope (car entry)))
        (setq faces (append (cdr entry) faces))))
    faces))

(ert-deftest dp-mode-fixture-faces ()
  "The assertions of editors/tests/fixture.dp, mapped to faces."
  (let ((failures nil) (checked 0))
    (with-temp-buffer
      (insert-file-contents (expand-file-name "fixture.dp" dp-test-dir))
      (dp-mode)
      (font-lock-ensure)
      (goto-char (point-min))
      (let ((target nil) (lnum 0))
        (while (not (eobp))
          (setq lnum (1+ lnum))
          (let ((line (buffer-substring-no-properties (line-beginning-position) (line-end-position))))
            (if (not (string-match "\\`\\([ \t]*\\)//\\([ \t]*\\)\\(\\^+\\|<-\\)\\(.*\\)\\'" line))
                (setq target (cons lnum (line-beginning-position)))
              (let* ((arrow (string= (match-string 3 line) "<-"))
                     (start (if arrow (length (match-string 1 line))
                              (+ (length (match-string 1 line)) 2 (length (match-string 2 line)))))
                     (width (if arrow 1 (length (match-string 3 line))))
                     (words (split-string (match-string 4 line)))
                     (dash (cl-position "-" words :test #'string=))
                     (present (if dash (cl-subseq words 0 dash) words))
                     (absent (and dash (cl-subseq words (1+ dash)))))
                (dotimes (i width)
                  (let* ((pos (+ (cdr target) start i))
                         (faces (dp-test-faces-at pos))
                         (where (format "fixture.dp:%d:%d (assertion line %d, %S)" (car target)
                                        (+ start i 1) lnum
                                        (buffer-substring-no-properties
                                         pos (min (+ pos 10) (save-excursion (goto-char pos) (line-end-position)))))))
                    (dolist (scope present)
                      (let ((want (dp-test--positive-faces scope)))
                        (when want
                          (setq checked (1+ checked))
                          (unless (cl-intersection want faces)
                            (push (format "%s: %s wants one of %S, faces are %S" where scope want faces)
                                  failures)))))
                    (dolist (scope absent)
                      (let ((avoid (dp-test--negative-faces scope)))
                        (when avoid
                          (setq checked (1+ checked))
                          (when (cl-intersection avoid faces)
                            (push (format "%s: not %s, faces are %S" where scope faces) failures))))))))))
          (forward-line 1))))
    (message "fixture.dp: %d face checks" checked)
    (should (> checked 150))
    (should (equal (nreverse failures) nil))))

(provide 'dp-mode-tests)

;;; dp-mode-tests.el ends here
