// rmqfs oracle shim (our code, not fastjson's): the generic type captured by an anonymous
// subclass, as fastjson's TypeReference does; JSON.parseObject(String, Type) reads it on Jackson.
// RocketMQ 5.3.3's TopicConfig builds one in its static initializer (its attributes map).
package com.alibaba.fastjson;

import java.lang.reflect.ParameterizedType;
import java.lang.reflect.Type;

public class TypeReference<T> {
    private final Type type;

    protected TypeReference() {
        this.type = ((ParameterizedType) getClass().getGenericSuperclass()).getActualTypeArguments()[0];
    }

    public Type getType() {
        return type;
    }
}
