"""The MIND importer on mutated modules (issue 24): each crash site the fuzzer found in the
old importer (IndexError, TypeError, ValueError) is a MindError with ``file:line:column``
naming what the opcode takes; a ``?`` dimension (allowed by the EBNF's ``Dimension``) says
that unknown sizes are not supported."""

import pytest

from nac.import_mind import MindError, import_mind

X = '%0 = Input() {name: "x"} : Tensor<f32, [2, 3]>\n'


@pytest.mark.parametrize("line, message", [
    # old: IndexError (p[1] of Sum without keepdims)
    ("%1 = Sum(%0, []) : Tensor<f32, []>",
     "2:6: Sum takes a list of integers, true or false; got \\[\\]"),
    # old: TypeError 'int' object is not iterable (Transpose permutation not a list)
    ("%1 = Transpose(%0, 2) : Tensor<f32, [3, 2]>",
     "2:6: Transpose takes a list of integers; got 2"),
    # old: TypeError 'bool' object is not iterable (parameters in the wrong order)
    ("%1 = Sum(false, [], %0) : Tensor<f32, []>",
     "2:6: Sum takes a list of integers, true or false; got false, \\[\\]"),
    # old: TypeError '<=' between int and str (a word among the parameters)
    ("%1 = Sum(%0, f16, [1], false) : Tensor<f32, [2]>",
     "2:6: Sum takes a list of integers, true or false; got 'f16', \\[1\\], false"),
    # old: ValueError could not convert string to float
    ("%1 = ConstF32(Sum) : Tensor<f32, []>", "2:6: ConstF32 takes a number; got 'Sum'"),
    # old: ValueError inhomogeneous shape (ragged literal)
    ("%1 = ConstTensor([[1.0, 1.0], 1.0]) : Tensor<f32, [2]>",
     "2:6: ConstTensor literal is not rectangular"),
    ("%1 = ConstTensor([1.5, 2]) : Tensor<i64, [2]>",
     "2:6: ConstTensor of int64 holds values that are not integers"),
    ("%1 = ConstI64(9223372036854775808) : Tensor<i64, []>",
     "2:6: ConstI64 takes an integer; got 9223372036854775808"),
    ("%1 = Slice(%0, [0, 1]) : Tensor<f32, [1]>",
     "2:6: Slice takes a list of start:end\\[:step\\] ranges; got \\[0, 1\\]"),
    ("%1 = Conv2d(%0, %0, [1, 1], Full) : Tensor<f32, [2]>",
     "2:6: Conv2d takes a list of integers, Valid, Same or Custom"),
    ("%1 = BinOp(%0, %0) : Tensor<f32, [2, 3]>", "2:6: BinOp takes Add, Sub or Mul; got none"),
    ("%1 = Relu(%0, 1) : Tensor<f32, [2, 3]>", "2:6: Relu takes no parameters; got 1"),
    ("%1 = Relu(%0, ?) : Tensor<f32, [2, 3]>", "2:15: expected an operand, a list or a "
     "number, found '\\?'"),
    # old: IndexError at the end of an attribute list
    ('%1 = Input() {name:', "2:20: expected .*found end of line"),
    ('%1 = Input() {name: "a\\q"} : Tensor<f32, [2]>', "2:21: bad string escape"),
    ("%1 = Input() {name: [3]} : Tensor<f32, [2]>", "2:6: Input needs a name attribute with a "
     "string value"),
    ("%1 = ConstTensor(" + "[" * 40 + "1" + "]" * 40 + ") : Tensor<f32, [1]>",
     "2:50: list literal nested deeper than 32 levels"),
])
def test_crash_sites_are_located_errors(line, message):
    with pytest.raises(MindError, match=f"m.ir:{message}"):
        import_mind(X + line + "\noutputs: %1\n", path="m.ir")


@pytest.mark.parametrize("text, col", [
    ('%0 = Input() {name: "x"} : Tensor<f32, [?, 3]>', 41),
    ('%0 = Input() {name: "x"} : Tensor<f32, [2, ?]>', 44),
])
def test_unknown_dimension_is_named(text, col):
    with pytest.raises(MindError, match=rf"m.ir:1:{col}: dimension '\?' \(unknown size\) is not "
                       r"supported: the importer needs static shapes"):
        import_mind(text + "\noutputs: %0\n", path="m.ir")


def test_reshape_to_unknown_dimension_is_named():
    with pytest.raises(MindError, match=r"m.ir:2:19: dimension '\?' \(unknown size\) is not "
                       r"supported"):
        import_mind(X + "%1 = Reshape(%0, [?, 2]) : Tensor<f32, [3, 2]>\noutputs: %1\n",
                    path="m.ir")
