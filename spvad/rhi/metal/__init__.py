"""The Metal backend (pyobjc): SPIR-V translated to MSL by SPIRV-Cross (translate.py), the device and its
programs. Never imports rhi.vulkan."""
