from setuptools import find_packages, setup

# torch is required but not pinned: an existing torch is kept. On a machine
# without torch, scripts/install.sh installs torch==2.13.0 first (the CPU wheel),
# so that pip never resolves an open range to a multi-GB CUDA build.
setup(
    name="seeder",
    version="0.1.0",
    description="One master seed reproduces a whole PyTorch training run, and resumes it bit for bit.",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["seeder", "seeder.*"]),
    python_requires=">=3.9",
    install_requires=["numpy>=1.22", "torch>=2.0"],
    extras_require={
        # DALI ships Linux wheels only (x86_64, aarch64); elsewhere the extra is empty and the DALI
        # tests skip with a reason. Checkpointing of every random operator needs DALI >= 1.34 (tested: 2.4.0).
        # For CUDA 13 install nvidia-dali-cuda130 instead; CPU-only pipelines need no GPU at all.
        "dali": ['nvidia-dali-cuda120>=1.34; platform_system == "Linux" and '
                 '(platform_machine == "x86_64" or platform_machine == "aarch64")'],
        "plot": ["matplotlib>=3.5", "scipy>=1.8", "nbclient>=0.7", "nbformat>=5.7", "ipykernel>=6", "tqdm>=4.60"],
        # Framework integrations (seeder/integrations/): imported only when used. scripts/install.sh pins the
        # torch already installed while installing these, so they never replace it.
        "lightning": ["lightning>=2.3", "jsonargparse[signatures]>=4.27.7"],  # LightningCLI needs jsonargparse
        "transformers": ["transformers>=4.40", "accelerate>=0.30"],
        "accelerate": ["accelerate>=0.30"],
        "test": ["pytest>=7", "hypothesis>=6", "pytest-timeout>=2", "torchdata>=0.8", "datasets>=2.14",
                 # the editable-install test builds a package in a fresh venv: these are what that build needs
                 "setuptools>=64", "wheel"],
    },
    entry_points={"console_scripts": ["seeder=seeder.cli:main"]},
    classifiers=["Programming Language :: Python :: 3", "Framework :: PyTorch"],
)
