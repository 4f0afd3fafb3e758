_DATA = {}


def put(key, value):
    _DATA[key] = value


def get(key):
    return _DATA.get(key)
