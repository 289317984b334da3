"""Native CTC loss (F.ctc_loss: speech and handwriting models, Hugging Face's *ForCTC heads),
forward and backward, against PyTorch CPU: padded and concatenated targets, both blank
positions, every reduction, zero_infinity, lengths as lists and as tensors, empty inputs and
targets, impossible alignments (infinite loss), strided log-probabilities, and the CPU's errors."""
import copy
import itertools

import pytest
import torch
import torch.nn.functional as F
import torch_ember


def ctc(device, log_probs, targets, input_lengths, target_lengths, lengths_as_tensors=False, **kw):
    x = log_probs.detach().clone().to(device).requires_grad_()
    if lengths_as_tensors:
        input_lengths = torch.tensor(input_lengths, device=device)
        target_lengths = torch.tensor(target_lengths, device=device)
    loss = F.ctc_loss(x, targets.to(device), input_lengths, target_lengths, **kw)
    weight = torch.randn(loss.shape, generator=torch.Generator().manual_seed(1), dtype=loss.dtype)
    loss.backward(weight.to(device))
    return loss.detach().cpu(), x.grad.cpu()


def targets_for(concatenated, target_lengths, batch, width, classes, blank, label_dtype=torch.int64):
    labels = torch.tensor([c for c in range(classes) if c != blank])
    shape = (sum(target_lengths),) if concatenated else (batch, width)
    return labels[torch.randint(0, len(labels), shape)].to(label_dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("concatenated", [False, True])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_ctc_loss_matches_cpu(dtype, concatenated, reduction, native_only):
    torch.manual_seed(0)
    frames, batch, classes, width = 12, 5, 6, 4
    # An empty input with an empty target, one with a target, an alignment with too few frames
    # (3 frames for 4 labels: infinite loss), an empty target and a full one.
    cases = [([12, 0, 3, 7, 12], [4, 0, 4, 0, 3]), ([0, 12, 1, 5, 9], [2, 4, 1, 2, 0])]
    for (il, tl), zero_infinity, blank, as_tensors in itertools.product(cases, (False, True), (0, 5), (False, True)):
        log_probs = torch.randn(frames, batch, classes, dtype=dtype).log_softmax(2)
        targets = targets_for(concatenated, tl, batch, width, classes, blank)
        kw = dict(blank=blank, reduction=reduction, zero_infinity=zero_infinity)
        want = ctc("cpu", log_probs, targets, il, tl, as_tensors, **kw)
        got = ctc("ember", log_probs, targets, il, tl, as_tensors, **kw)
        torch.testing.assert_close(got[0], want[0], equal_nan=True)
        torch.testing.assert_close(got[1], want[1], equal_nan=True)


def test_ctc_loss_hf_layout_int32_targets_and_unbatched(native_only):
    # Hugging Face's CTC heads: logits [batch, frames, classes] -> log_softmax -> transpose(0, 1),
    # a strided [frames, batch, classes] view; repeated labels need a blank between them.
    torch.manual_seed(0)
    logits = torch.randn(3, 9, 7)
    targets = torch.tensor([[2, 2, 3, 3], [1, 4, 0, 0], [5, 5, 5, 0]], dtype=torch.int32)
    want = ctc("cpu", logits.log_softmax(-1).transpose(0, 1), targets, [9, 8, 7], [4, 2, 3])
    got = ctc("ember", logits.log_softmax(-1).transpose(0, 1), targets, [9, 8, 7], [4, 2, 3])
    torch.testing.assert_close(got, want)
    want = ctc("cpu", logits[0].log_softmax(-1), targets[0], (9,), (4,))
    got = ctc("ember", logits[0].log_softmax(-1), targets[0], (9,), (4,))
    torch.testing.assert_close(got, want)


def test_ctc_head_trains_like_cpu(native_only):
    torch.manual_seed(0)
    head = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 10))
    feats, targets = torch.randn(4, 20, 16), torch.randint(1, 10, (4, 6))
    il, tl = torch.tensor([20, 18, 15, 20]), torch.tensor([6, 5, 3, 6])
    models = {"cpu": head, "ember": copy.deepcopy(head).to("ember")}
    losses = {}
    for device, model in models.items():
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        losses[device] = []
        for _ in range(3):
            lp = model(feats.to(device)).log_softmax(-1).transpose(0, 1)
            loss = F.ctc_loss(lp, targets.to(device), il.to(device), tl.to(device), zero_infinity=True)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses[device].append(loss.item())
    torch.testing.assert_close(losses["ember"], losses["cpu"], rtol=1e-5, atol=1e-5)
    for p, q in zip(models["ember"].parameters(), models["cpu"].parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-5, atol=1e-5)


def test_compiled_ctc_head_matches_cpu(fresh_compile):
    # PyTorch has no shape function for _ctc_loss (its log_alpha is as wide as the longest target),
    # so Dynamo breaks the graph there, on every backend; the loss itself then runs natively.
    torch.manual_seed(0)
    head = torch.nn.Linear(8, 6)
    feats, targets = torch.randn(3, 10, 8), torch.randint(1, 6, (3, 4))
    il, tl = torch.tensor([10, 9, 6]), torch.tensor([4, 3, 2])

    def loss_of(model, device):
        lp = model(feats.to(device)).log_softmax(-1).transpose(0, 1)
        return F.ctc_loss(lp, targets.to(device), il.to(device), tl.to(device), zero_infinity=True)

    want = loss_of(head, "cpu")
    want.backward()
    ember_head = copy.deepcopy(head).to("ember")
    ember_head.zero_grad()
    got = torch.compile(loss_of, backend="ember")(ember_head, "ember")
    got.backward()
    torch.testing.assert_close(got.cpu(), want)
    torch.testing.assert_close(ember_head.weight.grad.cpu(), head.weight.grad)


@pytest.mark.parametrize("input_lengths, target_lengths, match", [
    ([10, 9, 6], [4, 2, 3], "input_lengths to have value at most 9"),
    ([-1, 9, 6], [4, 2, 3], "input_lengths to have value at least 0"),
    ([9, 9, 6], [5, 2, 3], "size at least 5 at dimension 1"),
])
def test_ctc_loss_argument_errors_are_the_cpus(input_lengths, target_lengths, match):
    lp = torch.randn(9, 3, 7, device="ember").log_softmax(-1)
    targets = torch.randint(1, 7, (3, 4), device="ember")
    with pytest.raises(RuntimeError, match=match):
        F.ctc_loss(lp, targets, torch.tensor(input_lengths), torch.tensor(target_lengths))


def test_ctc_loss_label_out_of_range_is_a_device_error():
    lp = torch.randn(9, 2, 7, device="ember").log_softmax(-1)
    targets = torch.tensor([[1, 2], [3, 9]], device="ember")
    with pytest.raises(RuntimeError, match="ctc_loss: target label 9 of sample 1 is out of range for 7 classes"):
        F.ctc_loss(lp, targets, (9, 9), (2, 2))
        torch.ember.synchronize()
    torch.ember.synchronize()  # reported once; the device works again
    assert torch.ones(3, device="ember").sum().item() == 3


def test_hf_wav2vec2_ctc_matches_cpu_eager_and_compiled(native_only, fresh_compile):
    # A speech model nobody prepared for: strided feature convolutions, group norm, a weight-normed
    # grouped positional convolution, padded audio and labels padded with -100.
    transformers = pytest.importorskip("transformers", reason="transformers is a dev requirement")
    torch.manual_seed(0)
    cfg = transformers.Wav2Vec2Config(
        vocab_size=12, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        conv_dim=(16, 16, 16), conv_stride=(5, 2, 2), conv_kernel=(10, 3, 3), num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=4, mask_time_prob=0.0, layerdrop=0.0, ctc_zero_infinity=True)
    model = transformers.Wav2Vec2ForCTC(cfg).eval()
    audio, mask = torch.randn(2, 1600), torch.ones(2, 1600, dtype=torch.long)
    mask[1, 1200:] = 0
    labels = torch.randint(1, 12, (2, 8))
    labels[1, 5:] = -100
    want = model(audio, attention_mask=mask, labels=labels).loss
    want.backward()
    ember_model = copy.deepcopy(model).to("ember")
    for run in (ember_model, torch.compile(ember_model, backend="ember")):
        ember_model.zero_grad()
        got = run(audio.to("ember"), attention_mask=mask.to("ember"), labels=labels.to("ember")).loss
        got.backward()
        torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)
        for (name, p), q in zip(ember_model.named_parameters(), model.parameters()):
            torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-4, atol=5e-5, msg=name)
