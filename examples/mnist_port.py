"""pytorch/examples' MNIST script (mnist/main.py at 77f55b9) ported to seeder: an exact resume from
any step.

The port, following README.md and docs/checkpoints.md (12 lines added or changed, 7 removed):
``import seeder``; ``--seed`` defaults to None (seeder draws a seed and prints it);
``torch.manual_seed(args.seed)`` becomes ``seeder.init(args.seed)`` + ``seeder.reseed(0, 0)``;
the training loader is a ``seeder.DataLoader``; a ``seeder.Checkpoint`` (model, optimizer,
scheduler, seeder state) gives the epoch to start from and takes ``ckpt.step()`` after each
optimizer step; every epoch starts with ``seeder.reseed(1, epoch)``. ``seeder verify -- python
examples/mnist_port.py`` needs nothing more. The MNIST download is replaced by synthetic tensors
of its shape (``--samples``), so that it runs anywhere without torchvision.

Original: Copyright (c) 2017, Pytorch contributors, BSD 3-Clause License
(https://github.com/pytorch/examples/blob/main/LICENSE).
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.optim.lr_scheduler import StepLR

import seeder


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = self.conv1(x)
        x = F.relu(x)
        x = self.conv2(x)
        x = F.relu(x)
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = self.fc1(x)
        x = F.relu(x)
        x = self.dropout2(x)
        x = self.fc2(x)
        output = F.log_softmax(x, dim=1)
        return output


def train(args, model, device, train_loader, optimizer, epoch, ckpt):
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        ckpt.step()
        if batch_idx % args.log_interval == 0:
            print(
                f"Train Epoch: {epoch} [{batch_idx * len(data)}/{len(train_loader.dataset)} "
                f"({100.0 * batch_idx / len(train_loader):.0f}%)]\tLoss: {loss.item():.6f}"
            )
            if args.dry_run:
                break


def test(model, device, test_loader):
    model.eval()
    test_loss = 0
    correct = 0
    with torch.no_grad():
        for data, target in test_loader:
            data, target = data.to(device), target.to(device)
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction="sum").item()  # sum up batch loss
            pred = output.argmax(dim=1, keepdim=True)  # get the index of the max log-probability
            correct += pred.eq(target.view_as(pred)).sum().item()

    test_loss /= len(test_loader.dataset)

    print(
        f"\nTest set: Average loss: {test_loss:.4f}, Accuracy: "
        f"{correct}/{len(test_loader.dataset)} "
        f"({100.0 * correct / len(test_loader.dataset):.0f}%)\n"
    )


def main():
    # Training settings
    parser = argparse.ArgumentParser(description="PyTorch MNIST Example")
    parser.add_argument(
        "--batch-size",
        type=int,
        default=64,
        metavar="N",
        help="input batch size for training (default: 64)",
    )
    parser.add_argument(
        "--test-batch-size",
        type=int,
        default=1000,
        metavar="N",
        help="input batch size for testing (default: 1000)",
    )
    parser.add_argument(
        "--epochs",
        type=int,
        default=14,
        metavar="N",
        help="number of epochs to train (default: 14)",
    )
    parser.add_argument(
        "--lr", type=float, default=1.0, metavar="LR", help="learning rate (default: 1.0)"
    )
    parser.add_argument(
        "--gamma",
        type=float,
        default=0.7,
        metavar="M",
        help="Learning rate step gamma (default: 0.7)",
    )
    parser.add_argument("--no-accel", action="store_true", help="disables accelerator")
    parser.add_argument("--dry-run", action="store_true", help="quickly check a single pass")
    parser.add_argument(
        "--seed",
        type=int,
        default=None,
        metavar="S",
        help="random seed (default: drawn by seeder and printed)",
    )
    parser.add_argument(
        "--log-interval",
        type=int,
        default=10,
        metavar="N",
        help="how many batches to wait before logging training status",
    )
    parser.add_argument(
        "--samples",
        type=int,
        default=640,
        metavar="N",
        help="synthetic training samples (default: 640)",
    )
    parser.add_argument("--save-model", action="store_true", help="For Saving the current Model")
    args = parser.parse_args()

    use_accel = not args.no_accel and torch.accelerator.is_available()

    seeder.init(args.seed)
    seeder.reseed(0, 0)

    if use_accel:
        device = torch.accelerator.current_accelerator()
    else:
        device = torch.device("cpu")

    train_kwargs = {"batch_size": args.batch_size}
    test_kwargs = {"batch_size": args.test_batch_size}
    if use_accel:
        accel_kwargs = {
            "num_workers": 1,
            "persistent_workers": True,
            "pin_memory": True,
            "shuffle": True,
        }
        train_kwargs.update(accel_kwargs)
        test_kwargs.update(accel_kwargs)

    data = torch.Generator().manual_seed(0)  # synthetic MNIST-shaped data instead of the download
    dataset1 = torch.utils.data.TensorDataset(
        torch.randn(args.samples, 1, 28, 28, generator=data),
        torch.randint(0, 10, (args.samples,), generator=data),
    )
    dataset2 = torch.utils.data.TensorDataset(
        torch.randn(128, 1, 28, 28, generator=data), torch.randint(0, 10, (128,), generator=data)
    )
    train_loader = seeder.DataLoader(dataset1, **train_kwargs)
    test_loader = torch.utils.data.DataLoader(dataset2, **test_kwargs)

    model = Net().to(device)
    optimizer = optim.Adadelta(model.parameters(), lr=args.lr)

    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)
    ckpt = seeder.Checkpoint("mnist_ckpt.pt", model=model, optimizer=optimizer, scheduler=scheduler)
    for epoch in range(max(ckpt.resume(), 1), args.epochs + 1):
        seeder.reseed(1, epoch)
        train(args, model, device, train_loader, optimizer, epoch, ckpt)
        test(model, device, test_loader)
        scheduler.step()

    if args.save_model:
        torch.save(model.state_dict(), "mnist_cnn.pt")


if __name__ == "__main__":
    main()
