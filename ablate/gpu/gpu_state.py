"""NVML readings of the GPU's state, taken before and after timing, so that a measurement
made while the clocks were throttled can be seen as such. Without pynvml (nvidia-ml-py)
or a driver, `read` says "unavailable" instead of failing."""

# nvmlClocksEventReason* bits (nvml.h; "throttle reasons" in older drivers).
THROTTLE_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}


def decode_throttle(mask):
    """Names of the bits set in an NVML clocks-event bitmask; unknown bits by value."""
    names = [name for bit, name in THROTTLE_REASONS.items() if mask & bit]
    unknown = mask & ~sum(THROTTLE_REASONS)
    if unknown:
        names.append(f"unknown_0x{unknown:x}")
    return names


def _text(value):
    return value.decode() if isinstance(value, bytes) else value


def _handle(nvml, uuid, index):
    """The NVML device that CUDA calls `uuid` (CUDA and NVML may number devices differently)."""
    if uuid:
        try:
            return nvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
        except nvml.NVMLError:
            pass
    return nvml.nvmlDeviceGetHandleByIndex(index)


def read(uuid=None, index=0):
    """A dict of readings: name, driver, sm/mem clocks (MHz, current and max), temperature
    (C), power (W), throttle reasons. A reading the GPU does not support is None; without
    NVML the dict is {"available": False, "error": why}."""
    try:
        import pynvml as nvml
    except ImportError:
        return {"available": False, "error": "pynvml (nvidia-ml-py) is not installed"}
    try:
        nvml.nvmlInit()
    except Exception as e:  # no driver, no device
        return {"available": False, "error": f"nvmlInit failed: {e}"}
    try:
        h = _handle(nvml, uuid, index)

        def get(fn, *args):
            try:
                return fn(h, *args)
            except nvml.NVMLError:
                return None

        reasons = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            nvml.nvmlDeviceGetCurrentClocksThrottleReasons
        mask = get(reasons)
        power_mw = get(nvml.nvmlDeviceGetPowerUsage)
        return {
            "available": True,
            "name": _text(get(nvml.nvmlDeviceGetName)),
            "driver": _text(nvml.nvmlSystemGetDriverVersion()),
            "sm_clock_mhz": get(nvml.nvmlDeviceGetClockInfo, nvml.NVML_CLOCK_SM),
            "sm_clock_max_mhz": get(nvml.nvmlDeviceGetMaxClockInfo, nvml.NVML_CLOCK_SM),
            "mem_clock_mhz": get(nvml.nvmlDeviceGetClockInfo, nvml.NVML_CLOCK_MEM),
            "temperature_c": get(nvml.nvmlDeviceGetTemperature, nvml.NVML_TEMPERATURE_GPU),
            "power_w": None if power_mw is None else power_mw / 1000.0,
            "throttle_mask": mask,
            "throttle_reasons": None if mask is None else decode_throttle(mask),
        }
    except nvml.NVMLError as e:
        return {"available": False, "error": f"NVML: {e}"}
    finally:
        nvml.nvmlShutdown()
