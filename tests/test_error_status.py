"""A failure's status comes from its cause, the same under Triton's interpreter (these tests) as on a GPU.

On a GPU the compiler's front end traces a kernel's body before it runs and raises a
``CompilationError`` for what it refuses; under the interpreter the body runs as Python and the same
mistake comes back as an ``InterpreterError``.  Both are ``compile_error``.
"""
import pytest

from evaluator import Evaluator, EvaluatorSettings, Status
from evaluator.calls import Failure, call, is_compile_error
from tests.support.candidates import TASK, candidate

KERNEL_LINE = "tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0, mask=mask)"


def kernel_body(lines: str) -> str:
    """The test candidate whose kernel runs ``lines`` (``x`` is the loaded block) and stores ``y``."""
    indented = "\n".join("    " + line for line in lines.splitlines())
    body = f"x = tl.load(x_ptr + offs, mask=mask)\n{indented}\n    tl.store(out_ptr + offs, y, mask=mask)"
    return candidate().replace(KERNEL_LINE, body)


# case -> (the kernel's lines, what the reason names)
FRONT_END_ERRORS = {
    "a tl. function that does not exist": ("y = tl.no_such_function(x) * 2.0", "no_such_function"),
    "blocks of incompatible shapes": ("y = x + tl.arange(0, BLOCK_SIZE // 2) * 0.0", "incompatible dimensions"),
    "tl.arange over a range that is not a power of 2": ("y = x * 2.0 + tl.arange(0, 3) * 0.0", "power of 2"),
    "an undefined name": ("y = x * undefined_name", "undefined_name"),
    "a reshape that changes the number of elements": ("y = tl.reshape(x, (BLOCK_SIZE * 2,))", "reshape"),
    "a reduction over an axis the block lacks": ("y = x * 2.0 + tl.sum(x, axis=1)", "axis 1"),
    "a failed tl.static_assert": ("tl.static_assert(BLOCK_SIZE < 8)\ny = x * 2.0", "AssertionError"),
    "a Python call on a block": ("y = x * len(x)", "len()"),
}


@pytest.fixture(scope="module")
def evaluator():
    ev = Evaluator(EvaluatorSettings(device="cpu", timeout_s=60), "cpu")
    yield ev
    ev.close()


@pytest.mark.slow
def test_the_kernel_template_is_correct(evaluator):
    result = evaluator.evaluate("double", TASK, kernel_body("y = x * 2.0"))
    assert result.status is Status.CORRECT, result.reason


@pytest.mark.parametrize("case", list(FRONT_END_ERRORS))
def test_a_front_end_error_is_a_compile_error_under_the_interpreter(evaluator, case):
    lines, named = FRONT_END_ERRORS[case]
    result = evaluator.evaluate("double", TASK, kernel_body(lines))
    assert result.status is Status.COMPILE_ERROR, result.reason
    assert named in result.reason and "(in a Triton kernel)" in result.reason, result.reason
    assert "InterpreterError" in result.error  # the whole traceback is kept for the repair prompt
    assert result.extra["stage"] == "smoke test"  # the failed stage, told to the repair prompt


def test_a_host_side_exception_is_still_a_runtime_error(evaluator):
    result = evaluator.evaluate("double", TASK, candidate("raise ValueError('boom')"))
    assert result.status is Status.RUNTIME_ERROR and "ValueError: boom" in result.reason
    assert result.extra["stage"] == "smoke test"


def test_a_kernel_launched_with_missing_arguments_is_a_runtime_error(evaluator):
    # Binding a launch's arguments happens on the host, before any compiling, on a GPU as here.
    source = candidate().replace("(x, out, n, BLOCK_SIZE=BLOCK_SIZE)", "(x, out, BLOCK_SIZE=BLOCK_SIZE)")
    result = evaluator.evaluate("double", TASK, source)
    assert result.status is Status.RUNTIME_ERROR, result.reason


def _raised(fn) -> BaseException:
    try:
        fn()
    except BaseException as exc:  # noqa: BLE001 - the exception is the test's subject
        return exc
    raise AssertionError("nothing raised")


def test_a_device_side_assertion_under_the_interpreter_is_a_runtime_error():
    # A failed tl.device_assert is the interpreter builder's create_assert raising, wrapped as the
    # interpreter wraps every exception of a kernel's body: values met at run time, not code refused.
    from triton.runtime.errors import InterpreterError
    from triton.runtime.interpreter import interpreter_builder

    def kernel():
        try:
            interpreter_builder.create_assert(False, "index out of range")
        except Exception as exc:
            raise InterpreterError(repr(exc)) from exc

    assert not is_compile_error(_raised(kernel))


def test_compiler_errors_and_their_wrappers_are_compile_errors():
    from triton.compiler.errors import CompilationError
    from triton.runtime.errors import InterpreterError

    def compiled():
        try:
            raise AttributeError("module 'triton.language' has no attribute 'no_such_function'")
        except AttributeError as exc:
            raise CompilationError("def k(): ...", None, repr(exc)) from exc

    def interpreted_then_rethrown():
        try:
            raise InterpreterError("ValueError('Cannot make_shape_compatible')")
        except InterpreterError as exc:
            raise RuntimeError("the candidate's own wrapper") from exc

    assert is_compile_error(_raised(compiled)) and is_compile_error(_raised(interpreted_then_rethrown))
    assert not is_compile_error(_raised(lambda: 1 / 0))


def test_call_names_the_kernels_own_error_in_its_reason():
    from triton.runtime.errors import InterpreterError

    def model():
        try:
            raise NameError("name 'undefined_name' is not defined")
        except NameError as exc:
            raise InterpreterError(repr(exc)) from exc

    with pytest.raises(Failure) as failed:
        call(model, [], "smoke test")
    assert failed.value.status is Status.COMPILE_ERROR
    assert failed.value.reason == ("smoke test: NameError (in a Triton kernel): "
                                   "name 'undefined_name' is not defined")
