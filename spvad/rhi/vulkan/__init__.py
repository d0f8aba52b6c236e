"""The Vulkan backend (PyPI `vulkan`, cffi): device, buffers, pipelines and descriptor sets, command recording
and batches, the pipeline cache and the driver loader. Never imports rhi.metal."""
