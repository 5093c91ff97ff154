"""dp's Jupyter kernel under the Jupyter project's own kernel tests (jupyter_kernel_test), plus
dp's own protocol checks, and a headless run of examples/notebooks/tour.ipynb (nbclient).

Run by tests/jupyter.rs with JUPYTER_PATH naming a directory where `dp jupyter install
--prefix` put the kernel spec:
    python jupyter_kernel.py kernel            # the kernel tests
    python jupyter_kernel.py notebook PATH     # execute the notebook and check its outputs
Expected values are computed here (Python's math) or by hand, never taken from dp.
"""

import math
import os
import re
import sys
import tempfile
import time
import unittest

PLOT_DIR = tempfile.mkdtemp(prefix="dp-jupyter-plot-")


def kernel_tests():
    import jupyter_kernel_test as jkt
    from jupyter_client.session import Session

    class DpKernelTests(jkt.KernelTests):
        kernel_name = "dp"
        language_name = "dp"
        file_extension = ".dp"

        code_hello_world = 'println "hello, world"'
        # A warning (the value of `1` is dropped by `;`) is reported on stderr; the cell runs.
        code_stderr = "let noisy = (1; 2)"
        code_generate_error = '1 + "one"'
        code_execute_result = [
            {"code": "1 + 2", "result": "- : Int = 3"},
            # d/dx x^2 at 3 is 6.
            {"code": "grad (fun x -> x * x) 3.0", "result": "- : Float = 6.0"},
            {"code": "let seven = 7", "result": "val seven : Int"},
        ]
        code_display_data = [
            {"code": f'plot "{PLOT_DIR}/line.svg" [1.0, 3.0, 2.0]', "mime": "image/svg+xml"},
        ]
        code_inspect_sample = "map"
        completion_samples = [
            {"text": "matc", "matches": {"match"}},
            {"text": "string_len", "matches": {"string_length"}},
        ]
        complete_code_samples = ["1 + 2", "let x = 3", ":type map", "let g x = match x with\n| 0 -> 1\n| _ -> 2\n\n"]
        incomplete_code_samples = ["let f x =", "(1 +", "let g x = match x with\n| 0 -> 1"]
        invalid_code_samples = ["1 + + )"]

        def run_cell(self, code, **kw):
            self.flush_channels()
            return self.execute_helper(code=code, **kw)

        def test_dp_survives_a_type_error(self):
            reply, _ = self.run_cell("let good = 41")
            self.assertEqual(reply["content"]["status"], "ok")
            reply, out = self.run_cell('let bad = good + "x"')
            self.assertEqual(reply["content"]["status"], "error")
            self.assertEqual(reply["content"]["ename"], "TypeError")
            tb = "\n".join(reply["content"]["traceback"])
            self.assertIn("<cell", tb, "the diagnostic is located")
            self.assertNotIn("\x1b[", tb, "no colour escapes")
            self.assertEqual([m["msg_type"] for m in out], ["error"])
            reply, out = self.run_cell("good + 1")
            self.assertEqual(reply["content"]["status"], "ok")
            results = [m["content"]["data"]["text/plain"] for m in out if m["msg_type"] == "execute_result"]
            self.assertEqual(results, ["- : Int = 42"])
            # The failed cell bound nothing.
            reply, _ = self.run_cell("bad")
            self.assertEqual(reply["content"]["status"], "error")

        def test_dp_execution_count_silent_and_store_history(self):
            reply, _ = self.run_cell("1")
            n = reply["content"]["execution_count"]
            reply, out = self.run_cell("2", store_history=False)
            self.assertEqual(reply["content"]["execution_count"], n, "not stored: the count stays")
            reply, out = self.run_cell('println "quiet"; 3', silent=True)
            self.assertEqual(reply["content"]["status"], "ok")
            self.assertEqual(out, [], "a silent cell publishes nothing")
            reply, out = self.run_cell("4")
            self.assertEqual(reply["content"]["execution_count"], n + 1)
            counts = [m["content"]["execution_count"] for m in out if m["msg_type"] == "execute_result"]
            self.assertEqual(counts, [n + 1])

        def test_dp_interrupt_keeps_definitions(self):
            self.run_cell("let rec spin n = spin (n + 1)\nlet kept = 5")
            self.flush_channels()
            msg_id = self.kc.execute('println "started"; spin 0')
            # The output streams while the cell still runs: it arrives before the interrupt.
            deadline = time.time() + 15
            while True:
                self.assertLess(time.time(), deadline, "no stream output while the cell runs")
                msg = self.kc.get_iopub_msg(timeout=15)
                if msg["msg_type"] == "stream" and "started" in msg["content"]["text"]:
                    break
            started = time.time()
            self.km.interrupt_kernel()
            reply = self.kc.get_shell_msg(timeout=15)
            self.assertEqual(reply["parent_header"]["msg_id"], msg_id)
            self.assertEqual(reply["content"]["status"], "error")
            self.assertEqual(reply["content"]["ename"], "Interrupted")
            self.assertLess(time.time() - started, 10)
            reply, out = self.run_cell("kept * 2")
            results = [m["content"]["data"]["text/plain"] for m in out if m["msg_type"] == "execute_result"]
            self.assertEqual(results, ["- : Int = 10"])

        def test_dp_completion_positions_and_members(self):
            self.flush_channels()
            self.kc.complete("let y = nn.lin", 14)
            reply = self.get_non_kernel_info_reply(timeout=10)
            c = reply["content"]
            self.assertIn("linear", c["matches"])
            self.assertEqual((c["cursor_start"], c["cursor_end"]), (11, 14))
            self.run_cell("let my_long_name = 1")
            self.kc.complete("my_long")
            reply = self.get_non_kernel_info_reply(timeout=10)
            self.assertEqual(reply["content"]["matches"], ["my_long_name"])

        def test_dp_inspect_shows_type_and_doc(self):
            self.run_cell("/// Twice its argument.\nlet dbl x = 2 * x")
            self.kc.inspect("dbl 4", 2)
            reply = self.get_non_kernel_info_reply(timeout=10)
            text = reply["content"]["data"]["text/plain"]
            self.assertIn("dbl : Int -> Int", text)
            self.assertIn("Twice its argument.", text)
            self.kc.inspect("let z = nn.linear", 14)
            reply = self.get_non_kernel_info_reply(timeout=10)
            self.assertTrue(reply["content"]["found"])
            self.assertIn("nn.linear", reply["content"]["data"]["text/plain"])
            self.kc.inspect("1 + 2", 1)
            reply = self.get_non_kernel_info_reply(timeout=10)
            self.assertFalse(reply["content"]["found"])

        def test_dp_drops_badly_signed_messages(self):
            self.flush_channels()
            wrong = Session(key=b"not-the-key")
            wrong.send(self.kc.shell_channel.socket, "kernel_info_request", {})
            with self.assertRaises(Exception):
                self.kc.get_shell_msg(timeout=1)
            # The kernel is still there.
            self.kc.kernel_info()
            reply = self.kc.get_shell_msg(timeout=10)
            self.assertEqual(reply["msg_type"], "kernel_info_reply")

        def test_dp_history_and_comm_info(self):
            self.flush_channels()
            self.kc.history(hist_access_type="tail", n=10)
            reply = self.get_non_kernel_info_reply(timeout=10)
            self.assertEqual(reply["content"], {"status": "ok", "history": []})
            self.kc.comm_info()
            reply = self.get_non_kernel_info_reply(timeout=10)
            self.assertEqual(reply["content"], {"status": "ok", "comms": {}})

    suite = unittest.TestLoader().loadTestsFromTestCase(DpKernelTests)
    result = unittest.TextTestRunner(verbosity=2, stream=sys.stdout).run(suite)
    skipped = {t.id().rsplit(".", 1)[1] for t, _ in result.skipped}
    # The samples above cover these; a skip would mean a sample went missing.
    must_run = {"test_execute_stdout", "test_execute_stderr", "test_execute_result", "test_display_data",
                "test_error", "test_inspect", "test_completion", "test_is_complete", "test_kernel_info"}
    assert not (must_run & skipped), f"skipped: {must_run & skipped}"
    return result.wasSuccessful()


def notebook(path):
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    work = tempfile.mkdtemp(prefix="dp-jupyter-tour-")
    NotebookClient(nb, kernel_name="dp", timeout=60, resources={"metadata": {"path": work}}).execute()

    def cell(tag):
        return next(c for c in nb.cells if tag in c.get("metadata", {}).get("tags", []))

    def text(c):
        return "".join(o["data"]["text/plain"] for o in c.outputs if o["output_type"] == "execute_result")

    # f x = sin x * x^2 + 3x, so f'(2) = cos 2 * 4 + 4 sin 2 + 3.
    m = re.fullmatch(r"- : Float = (\S+)", text(cell("grad")))
    assert m, text(cell("grad"))
    expected = math.cos(2) * 4 + 4 * math.sin(2) + 3
    assert abs(float(m.group(1)) - expected) < 1e-9, (m.group(1), expected)

    # [[1, 2], [3, 4]] squared is [[7, 10], [15, 22]].
    shown = text(cell("tensor"))
    assert "val mm : Tensor" in shown, shown
    mm = next(c for c in nb.cells if c.cell_type == "code" and c.source == "mm")
    assert text(mm) == "- : Tensor = tensor [[7.0, 10.0], [15.0, 22.0]]", text(mm)

    plot = cell("plot")
    streams = "".join(o.get("text", "") for o in plot.outputs if o["output_type"] == "stream")
    assert "plotting" in streams, plot.outputs
    svgs = [o["data"]["image/svg+xml"] for o in plot.outputs if o["output_type"] == "display_data"]
    assert len(svgs) == 1 and "<svg" in svgs[0], plot.outputs
    assert os.path.exists(os.path.join(work, "tour-losses.svg")), "the plot's file is written too"

    errors = [o for o in cell("raises-exception").outputs if o["output_type"] == "error"]
    assert len(errors) == 1 and errors[0]["ename"] == "TypeError", cell("raises-exception").outputs
    assert "String" in "\n".join(errors[0]["traceback"])
    assert text(cell("after-error")) == "- : Float = 2.25", text(cell("after-error"))
    print(f"executed {path}: {len(nb.cells)} cells, outputs as expected")
    return True


if __name__ == "__main__":
    ok = kernel_tests() if sys.argv[1] == "kernel" else notebook(sys.argv[2])
    sys.exit(0 if ok else 1)
